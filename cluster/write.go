package cluster

import (
	"context"
	"fmt"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/authz"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

// The writes a server's API makes: each is built into its fsm.Request
// here, with the version gates of a rolling upgrade, and committed
// (propose.go).

func (s *Server) register(ctx context.Context, p *api.PluginInfo) (api.WriteResult, error) {
	if p == nil {
		return api.WriteResult{}, fmt.Errorf("register: %w: plugin is missing", api.ErrInvalid)
	}
	// A server of an older release would apply the entry without its TTL
	// or health and hold a state the others do not: version skew, refused
	// until every server knows them (as a command it does not know would
	// be).
	for _, f := range []struct {
		used    bool
		what    string
		version int
	}{
		{p.TTL != 0, "leases", rpcVersionLeases},
		{p.Health != nil, "instance health", rpcVersionHealth},
	} {
		if !f.used {
			continue
		}
		if old := s.serverBelow(f.version); old != "" {
			return api.WriteResult{}, fmt.Errorf("register %s/%s/%s with %s: %w", p.Type, p.Name, p.AllocID, f.what,
				notApplied(api.CodeUnknownCommand, fmt.Errorf("server %s does not know %s yet; upgrade it first", old, f.what)))
		}
	}
	req, err := s.registerRequest(p, scopedRequestID(ctx, "register"), backend.IfNodeID(ctx))
	if err != nil {
		return api.WriteResult{}, err
	}
	res, err := s.write(ctx, req)
	if err != nil {
		return res, fmt.Errorf("register %s/%s/%s: %w", p.Type, p.Name, p.AllocID, err)
	}
	if p.TTL != 0 && res.Result == api.ResultUnchanged {
		s.renewAfterRegister(ctx, p)
	}
	return res, nil
}

// registerRequest is the command registering p for a caller bound to
// ifNode (when set; see backend.WithIfNodeID): conditional on the instance
// it replaces belonging to ifNode, checked where the entry is applied. A
// caller bound to no node registers plainly, as every release does.
//
// While a server of the configuration does not know the conditional
// command (a rolling upgrade), the condition is checked here, against this
// server's replica, and a plain registration is proposed: a registration
// from another node ordered between the check and the entry (or not yet
// applied here) can still be replaced, but the plain take-over is refused,
// and the agents' registrations go on through the upgrade (refusing them
// until it ends, as a registration with a lease is refused, would leave
// every plugin of a secure cluster unregistrable meanwhile).
func (s *Server) registerRequest(p *api.PluginInfo, requestID, ifNode string) (fsm.Request, error) {
	if ifNode == "" || s.serverBelow(rpcVersionConditionalRegister) == "" {
		return fsm.NewRegisterRequest(p, requestID, ifNode), nil
	}
	if err := s.fsm.State().CheckOwner(p, ifNode); err != nil {
		return nil, fmt.Errorf("register %s/%s/%s: %w", p.Type, p.Name, p.AllocID, err)
	}
	return fsm.NewRegisterRequest(p, requestID, ""), nil
}

// deregister removes one instance, conditionally when req carries a
// condition (see api.DeregisterRequest): a refused condition is an error
// wrapping api.ErrConflict, and nothing changed.
func (s *Server) deregister(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error) {
	res, err := s.write(ctx, fsm.NewDeregisterRequest(req, scopedRequestID(ctx, "deregister")))
	if err != nil {
		return res, fmt.Errorf("deregister %s/%s/%s: %w", req.Type, req.Name, req.AllocID, err)
	}
	return res, nil
}

func (s *Server) deregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error) {
	res, err := s.write(ctx, &fsm.DeregisterNodeRequest{NodeID: nodeID, RequestID: scopedRequestID(ctx, "deregister-node")})
	if err != nil {
		return res, fmt.Errorf("deregister node %s: %w", nodeID, err)
	}
	return res, nil
}

// aclBootstrap proposes the bootstrap token (its secret already hashed by
// the caller: only the hash reaches the log). It fails with
// api.ErrACLBootstrapped after the first.
//
// Token creation never carries a request ID: a retry under the same ID
// would be answered with the first attempt's result while the caller
// holds the retry's secret, which was never stored. A retried create
// makes a second token (or finds the cluster bootstrapped) instead.
func (s *Server) aclBootstrap(ctx context.Context, t fsm.ACLToken) (api.WriteResult, error) {
	res, err := s.write(ctx, &fsm.ACLBootstrapRequest{Token: t})
	if err != nil {
		return res, fmt.Errorf("acl bootstrap: %w", err)
	}
	return res, nil
}

func (s *Server) aclTokenSet(ctx context.Context, t fsm.ACLToken) (api.WriteResult, error) {
	res, err := s.write(ctx, &fsm.ACLTokenSetRequest{Token: t})
	if err != nil {
		return res, fmt.Errorf("acl token create %s: %w", t.AccessorID, err)
	}
	return res, nil
}

func (s *Server) aclTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error) {
	requestID := scopedRequestID(ctx, "acl-token-delete")
	if err := s.checkTokenToDelete(ctx, accessorID, requestID); err != nil {
		return api.WriteResult{}, err
	}
	res, err := s.write(ctx, &fsm.ACLTokenDeleteRequest{AccessorID: accessorID, RequestID: requestID})
	if err != nil {
		return res, fmt.Errorf("acl token delete %s: %w", accessorID, err)
	}
	return res, nil
}

// checkTokenToDelete refuses the deletion of a token the cluster does not
// hold (api.ErrNotFound, in the words Consul refuses an accessor ID it
// cannot find with) before anything is proposed: an operator who mistypes
// an accessor learns it, where the entry would answer "absent". A retry
// of a deletion that applied (its request ID recorded) goes on to the
// write, which answers the first attempt's result. The FSM itself is
// unchanged (an absent token's deletion still applies as "absent"), so
// every release replays the log alike: a token another call deletes
// between this check and the entry is answered "absent" by the FSM.
func (s *Server) checkTokenToDelete(ctx context.Context, accessorID, requestID string) error {
	if err := api.ValidateIdentifier("AccessorID", accessorID); err != nil {
		return err
	}
	held := func(st *fsm.State) bool {
		if _, ok := st.ACLToken(accessorID); ok {
			return true
		}
		if requestID == "" {
			return false
		}
		_, retry := st.Request(requestID)
		return retry
	}
	if held(s.fsm.State()) {
		return nil
	}
	// This replica may not have applied the token's creation yet: only a
	// state that holds every write committed before the call may say the
	// token does not exist.
	st, _, err := s.Read(ctx, api.Linearizable)
	if err != nil {
		return fmt.Errorf("acl token delete %s: %w", accessorID, err)
	}
	if !held(st) {
		return notFound(fmt.Sprintf("Cannot find token %q", accessorID))
	}
	return nil
}

// scopedRequestID is the request ID a write of kind by ctx's caller is
// recorded under (api.ScopeRequestID): one caller's ID never answers
// another's write, or another kind of write. It is computed here, once, by
// the server that builds the command: a client agent forwards the raw ID,
// and a follower forwards the encoded command to the leader.
func scopedRequestID(ctx context.Context, kind string) string {
	return api.ScopeRequestID(authz.From(ctx).Scope(), kind, api.RequestID(ctx))
}

// write commits req (commit, propose.go) from any server.
func (s *Server) write(ctx context.Context, req fsm.Request) (api.WriteResult, error) {
	res, err := s.commit(ctx, req, anyServer)
	if res == nil {
		return api.WriteResult{}, err
	}
	if err != nil {
		return api.WriteResult{Index: res.Index}, err
	}
	return api.WriteResult{Index: res.Index, Result: res.Result}, nil
}
