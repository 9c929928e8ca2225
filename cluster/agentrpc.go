package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/authz"
	"github.com/plugreg/plugreg/delivery"
	"github.com/plugreg/plugreg/transport"
)

// agentMethod is how the server port authorizes one client-agent method
// before it decodes a byte of its arguments: a caller that proved nothing
// cannot make a server read a large request (a restore's archive) only to
// be refused.
type agentMethod struct {
	// rule is the coarsest permission the method could ever need,
	// checked against the token in the request's header
	// (transport.CallerToken) before the arguments are decoded; the
	// method's own check follows (authz.Guard). Nil: the transport's
	// proof of the peer is enough (the agent's own reads and status,
	// token lookups, bootstrap).
	rule func(context.Context) error
	// large: the arguments may be large (an archive), so they are never
	// decoded for a caller the header did not prove (see preauthorize).
	large bool
}

// agentMethods are the client-agent methods, each with its rule: a method
// not here is not served to client agents.
var agentMethods = map[string]agentMethod{
	agentrpc.Register:        {rule: authz.WriteSome},
	agentrpc.Deregister:      {rule: authz.WriteSome},
	agentrpc.DeregisterNode:  {rule: authz.WriteSome},
	agentrpc.Renew:           {rule: authz.WriteSome},
	agentrpc.HostSync:        {rule: authz.WriteSome},
	agentrpc.Query:           {},
	agentrpc.Subscribe:       {},
	agentrpc.Status:          {},
	agentrpc.ACLResolve:      {},
	agentrpc.ACLBootstrap:    {},
	agentrpc.ACLTokenCreate:  {rule: authz.Operator},
	agentrpc.ACLTokens:       {rule: authz.Operator},
	agentrpc.ACLTokenDelete:  {rule: authz.Operator},
	agentrpc.SnapshotSave:    {rule: authz.Operator},
	agentrpc.SnapshotRestore: {rule: authz.Operator, large: true},
	agentrpc.AutopilotHealth: {rule: authz.ReadCluster},
}

// maxAgentArgs bounds the arguments of every client-agent method but a
// restore: a registration is at most api.MaxPluginBytes of strings, a
// token request 16 policies of 64 types.
const maxAgentArgs = 1 << 20

// caller is who a client agent's call is made for, as its request's
// header says.
type caller struct {
	token string         // the header's token; "" for none
	id    authz.Identity // its identity, when there is a token or a rule
}

// preauthorize checks m's rule against the header's token, before the
// arguments are read: an error refuses the call undecoded (the transport
// then reads at most a few KiB of them, and closes the connection rather
// than read more).
//
// An older client agent sends its token in the arguments alone. Without a
// header token the anonymous identity's rule decides; where it refuses
// (ACLs with default deny) the small arguments of every method but a
// restore are still decoded, within maxAgentArgs, and the token they
// carry is checked as before, so that older agents keep registering and
// renewing through an upgrade. An older agent's restore is refused there
// until it is upgraded (a server's HTTP API restores meanwhile).
func (s *Server) preauthorize(ctx context.Context, m agentMethod) (caller, error) {
	c := caller{token: transport.CallerToken(ctx)}
	if m.rule == nil && c.token == "" {
		return c, nil
	}
	// A header token is resolved whatever the rule: the method's
	// arguments are then checked as its identity (handleAgentRPC's as).
	id, err := s.resolver().Resolve(ctx, c.token)
	if err != nil {
		return c, err
	}
	c.id = id
	if m.rule == nil {
		return c, nil
	}
	if err := m.rule(authz.With(ctx, id)); err != nil && (c.token != "" || m.large) {
		return c, err
	}
	return c, nil
}

// handleAgentRPC serves the calls of client agents (api.RPC*) with the
// server's Backend behind authz.Guard, so a request through a client agent
// means what it means through a server's HTTP API and is checked by the
// same rules: writes and operator calls as the token they carry (the HTTP
// caller's, or the agent's own), reads as the agent (the transport vouches
// for it; the agent cuts what it forwards to its own callers' tokens).
// Each call is authorized before its arguments are decoded
// (preauthorize). It reports false for other methods.
func (s *Server) handleAgentRPC(ctx context.Context, method string, dec func(interface{}) error) (reply interface{}, handled bool, err error) {
	m, ok := agentMethods[method]
	if !ok {
		return nil, false, nil
	}
	c, err := s.preauthorize(ctx, m)
	if err != nil {
		return nil, true, err
	}
	b := s.Backend()
	g := authz.Guard(b)
	decode := func(v interface{}) error {
		if err := dec(v); err != nil {
			return fmt.Errorf("%w: decode %s: %v", api.ErrMalformed, method, err)
		}
		return nil
	}
	// as decodes args and returns ctx carrying the caller's identity: the
	// header's token's, which the args' token (older agents send it
	// there alone) may not contradict; without one, the args' token's.
	as := func(args interface{}, token *string) (context.Context, error) {
		if err := decode(args); err != nil {
			return nil, err
		}
		if c.token != "" {
			if *token != "" && *token != c.token {
				return nil, fmt.Errorf("%w: %s: the arguments' token is not the header's", api.ErrInvalid, method)
			}
			return authz.With(ctx, c.id), nil
		}
		id, err := s.resolver().Resolve(ctx, *token)
		if err != nil {
			return nil, err
		}
		return authz.With(ctx, id), nil
	}
	// write is as for a write, whose request ID (checked first: it goes
	// into the log) it adds.
	write := func(args interface{}, token, id *string) (context.Context, error) {
		wctx, err := as(args, token)
		if err != nil {
			return nil, err
		}
		if err := api.ValidateRequestID(*id); err != nil {
			return nil, err
		}
		if *id == "" {
			return wctx, nil
		}
		return api.WithRequestID(wctx, *id), nil
	}
	anyone := authz.With(ctx, authz.Anyone())
	switch method {
	case agentrpc.Register:
		var args agentrpc.RegisterArgs
		wctx, err := write(&args, &args.Token, &args.RequestID)
		if err != nil {
			return nil, true, err
		}
		if args.Plugin == nil {
			return nil, true, fmt.Errorf("%w: plugin is missing", api.ErrInvalid)
		}
		// Validated once, where the command is encoded (fsm.EncodeCommand),
		// as for the other writes below: never twice on the write path.
		res, err := g.Register(wctx, args.Plugin)
		return res, true, err
	case agentrpc.Deregister:
		var args agentrpc.DeregisterArgs
		wctx, err := write(&args, &args.Token, &args.RequestID)
		if err != nil {
			return nil, true, err
		}
		res, err := g.Deregister(wctx, args.Request)
		return res, true, err
	case agentrpc.DeregisterNode:
		var args agentrpc.DeregisterNodeArgs
		wctx, err := write(&args, &args.Token, &args.RequestID)
		if err != nil {
			return nil, true, err
		}
		res, err := g.DeregisterNode(wctx, args.NodeID)
		return res, true, err
	case agentrpc.HostSync:
		var args agentrpc.HostSyncArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, err
		}
		// Checked whole where it is written (Server.hostSync), before
		// any of it is.
		res, err := g.SyncHost(actx, args.Request)
		return res, true, err
	case agentrpc.Renew:
		var args agentrpc.RenewArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, err
		}
		if err := args.Request.Validate(); err != nil {
			return nil, true, err
		}
		res, err := g.Renew(actx, args.Request)
		return res, true, err
	case agentrpc.Query:
		var q api.Query
		if err := decode(&q); err != nil {
			return nil, true, err
		}
		res, err := g.Query(anyone, q)
		if errors.Is(err, api.ErrNotFound) && res != nil {
			res.NotFound = err.Error() // in the reply: the index crosses too
			return res, true, nil
		}
		if err != nil {
			return nil, true, err
		}
		return res, true, nil
	case agentrpc.SnapshotSave:
		var args agentrpc.SnapshotSaveArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, err
		}
		write, err := g.SnapshotSave(actx, args.Stale)
		if err != nil {
			return nil, true, err
		}
		// The reply is one message: the client agent streams it on.
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			return nil, true, err
		}
		return buf.Bytes(), true, nil
	case agentrpc.SnapshotRestore:
		var args agentrpc.SnapshotRestoreArgs
		wctx, err := write(&args, &args.Token, &args.RequestID)
		if err != nil {
			return nil, true, err
		}
		res, err := g.SnapshotRestore(wctx, args.Archive)
		return res, true, err
	case agentrpc.AutopilotHealth:
		var args agentrpc.ACLCallerArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, err
		}
		h, err := g.AutopilotHealth(actx)
		return h, true, err
	case agentrpc.Status:
		var none struct{}
		if err := decode(&none); err != nil {
			return nil, true, err
		}
		return s.status(), true, nil
	case agentrpc.Subscribe:
		var args agentrpc.SubscribeArgs
		if err := decode(&args); err != nil {
			return nil, true, err
		}
		return transport.Streamer(func(ctx context.Context, send func(interface{}) error) error {
			ch, start, err := g.Subscribe(authz.With(ctx, authz.Anyone()), args.Types, args.From, args.Heartbeat)
			if err != nil {
				return err
			}
			// The first event says where the stream starts.
			if err := send(&api.Event{Index: start, EventType: api.EventHeartbeat}); err != nil {
				return err
			}
			for ev := range ch {
				// Encoded once for every client agent's upstream on
				// this server, not once per agent.
				b, err := ev.Bytes(delivery.Upstream, func() ([]byte, error) { return transport.Encode(ev.Event) })
				if err != nil {
					return err
				}
				if err := send(transport.Encoded(b)); err != nil {
					return err
				}
			}
			if ctx.Err() == nil {
				return unknown(api.CodeShutdown, ErrShutdown)
			}
			return nil
		}), true, nil
	case agentrpc.ACLResolve:
		var args agentrpc.ACLResolveArgs
		if err := decode(&args); err != nil {
			return nil, true, err
		}
		t, err := b.resolveHash(args.SecretHash)
		return t, true, err
	case agentrpc.ACLBootstrap:
		var none struct{}
		if err := decode(&none); err != nil {
			return nil, true, err
		}
		t, err := g.ACLBootstrap(ctx)
		return t, true, err
	case agentrpc.ACLTokenCreate:
		var args agentrpc.ACLTokenCreateArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, err
		}
		t, err := g.ACLTokenCreate(actx, args.Request)
		return t, true, err
	case agentrpc.ACLTokens:
		var args agentrpc.ACLCallerArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, err
		}
		ts, err := g.ACLTokens(actx)
		return ts, true, err
	case agentrpc.ACLTokenDelete:
		var args agentrpc.ACLTokenDeleteArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, err
		}
		res, err := g.ACLTokenDelete(actx, args.AccessorID)
		return res, true, err
	}
	return nil, false, nil
}

// resolver resolves the tokens client agents' calls carry.
func (s *Server) resolver() authz.Resolver {
	return authz.Resolver{ACLs: s.cfg.ACLEnabled, DefaultDeny: s.cfg.ACLDefaultDeny, Tokens: s.Backend().ResolveToken}
}

// status is this server's view of the Raft cluster, for client agents.
func (s *Server) status() *agentrpc.StatusReply {
	out := &agentrpc.StatusReply{Leader: s.Leader(), LeaderID: s.LeaderID()}
	if servers, err := s.RaftConfiguration(); err == nil {
		for _, srv := range servers {
			out.Peers = append(out.Peers, string(srv.Address))
			out.Voters = append(out.Voters, string(srv.ID))
		}
	}
	return out
}
