package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/plugreg/plugreg/agentrpc"
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
	res, err := s.write(ctx, &fsm.ACLTokenDeleteRequest{AccessorID: accessorID, RequestID: scopedRequestID(ctx, "acl-token-delete")})
	if err != nil {
		return res, fmt.Errorf("acl token delete %s: %w", accessorID, err)
	}
	return res, nil
}

// scopedRequestID is the request ID a write of kind by ctx's caller is
// recorded under (api.ScopeRequestID): one caller's ID never answers
// another's write, or another kind of write. It is computed here, once, by
// the server that builds the command: a client agent forwards the raw ID,
// and a follower forwards the encoded command to the leader.
func scopedRequestID(ctx context.Context, kind string) string {
	return api.ScopeRequestID(authz.From(ctx).Scope(), kind, api.RequestID(ctx))
}

// rpcVersionProtoCommands is the RPCVersion (gossip.Meta) of servers that
// apply fsm.RegisterProtoCommand and fsm.DeregisterProtoCommand. A server
// writes registrations and deregistrations in protobuf only while every
// server of the configuration says so; before that (a rolling upgrade) it
// writes them in msgpack, which every release applies.
const rpcVersionProtoCommands = 4

// rpcVersionConditionalRegister is the RPCVersion (gossip.Meta) of servers
// that apply fsm.ConditionalRegisterCommand, which a node-bound caller's
// registrations are once every server of the configuration says so (see
// registerRequest for before).
const rpcVersionConditionalRegister = 5

// rpcVersionHostSync is the RPCVersion (gossip.Meta) of servers that
// apply fsm.HostSyncCommand and fsm.NodeHealthBatchCommand and serve
// agentrpc.HostSync: a host's sync is one entry, and the leader's marks
// of many nodes one, once every server of the configuration says so (one
// write per instance, and per node, before).
const rpcVersionHostSync = agentrpc.HostSyncRPCVersion

// rpcVersion is what this release's servers say they speak.
const rpcVersion = rpcVersionHostSync

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

// serverBelow names a server of the Raft configuration whose gossip does
// not say it speaks RPCVersion version (or that gossip does not know), ""
// when every one does: what a new command type or field waits for.
//
// It answers from what it learned within the last second (the writes
// that ask are many, and the question needs the configuration and every
// gossip member). A server that joins within that second may see an entry
// it cannot apply; adding a server older than the rest is outside the
// upgrade rule of docs/operations.md (upgrade every server, never add an
// older one), and a check made on every write would still race the join.
func (s *Server) serverBelow(version int) string {
	o := s.oldest.Load()
	if o == nil || time.Since(o.checked) >= time.Second {
		o = s.findOldestServer()
		s.oldest.Store(o)
	}
	if o.version < version {
		return o.id
	}
	return ""
}

// oldestServer is a server of the configuration with the lowest RPCVersion
// (0 when gossip does not know it), as learned at checked.
type oldestServer struct {
	id      string
	version int
	checked time.Time
}

func (s *Server) findOldestServer() *oldestServer {
	o := &oldestServer{version: rpcVersion, checked: time.Now()}
	servers, err := s.RaftConfiguration()
	if err != nil || s.gossip == nil {
		// Not remembered: asked again by the next write.
		return &oldestServer{id: "(the configuration is unreadable)"}
	}
	known := map[string]int{}
	for _, m := range s.gossip.Members() {
		known[m.Meta.ID] = m.Meta.RPCVersion
	}
	for _, srv := range servers {
		if v := known[string(srv.ID)]; v < o.version {
			o.id, o.version = string(srv.ID), v
		}
	}
	return o
}
