package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/authz"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/transport"
)

// agentEndpoint is one client-agent method of the server port: how the
// port authorizes it before it decodes a byte of its arguments (a caller
// that proved nothing cannot make a server read a large request, a
// restore's archive, only to be refused), and its handler.
type agentEndpoint struct {
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
	// serve decodes the arguments and answers, for c.
	serve func(s *Server, ctx context.Context, c caller, decode decoder) (any, error)
}

// decoder decodes a request's arguments into its argument.
type decoder func(any) error

// agentEndpoints are the client-agent methods (agentrpc), served with the
// server's Backend behind authz.Guard, so a request through a client
// agent means what it means through a server's HTTP API and is checked
// by the same rules: writes and operator calls as the token they carry
// (the HTTP caller's, or the agent's own: asCaller), reads as the agent
// (the transport vouches for it, and the agent cuts what it forwards to
// its own callers' tokens: asAgent). A method not here is not served to
// client agents.
var agentEndpoints = map[string]agentEndpoint{
	agentrpc.Register: asCaller(authz.WriteSome, func(ctx context.Context, g backend.Backend, a *agentrpc.RegisterArgs) (any, error) {
		if a.Plugin == nil {
			return nil, fmt.Errorf("%w: plugin is missing", api.ErrInvalid)
		}
		// Validated where the command is encoded (fsm.EncodeCommand), as
		// for every write: the server's edge for the log.
		return g.Register(ctx, a.Plugin)
	}),
	agentrpc.Deregister: asCaller(authz.WriteSome, func(ctx context.Context, g backend.Backend, a *agentrpc.DeregisterArgs) (any, error) {
		return g.Deregister(ctx, a.Request)
	}),
	agentrpc.DeregisterNode: asCaller(authz.WriteSome, func(ctx context.Context, g backend.Backend, a *agentrpc.DeregisterNodeArgs) (any, error) {
		return g.DeregisterNode(ctx, a.NodeID)
	}),
	agentrpc.Renew: asCaller(authz.WriteSome, func(ctx context.Context, g backend.Backend, a *agentrpc.RenewArgs) (any, error) {
		return g.Renew(ctx, a.Request) // validated by Server.Renew
	}),
	agentrpc.HostSync: asCaller(authz.WriteSome, func(ctx context.Context, g backend.Backend, a *agentrpc.HostSyncArgs) (any, error) {
		// Checked whole where it is written (Server.hostSync), before
		// any of it is.
		return g.SyncHost(ctx, a.Request)
	}),
	agentrpc.Query: asAgent(func(s *Server, ctx context.Context, q *api.Query) (any, error) {
		res, err := authz.Guard(s.Backend()).Query(authz.With(ctx, authz.Anyone()), *q)
		if errors.Is(err, api.ErrNotFound) && res != nil {
			res.NotFound = err.Error() // in the reply: the index crosses too
			return res, nil
		}
		return res, err
	}),
	agentrpc.Subscribe: asAgent(func(s *Server, _ context.Context, a *agentrpc.SubscribeArgs) (any, error) {
		return s.upstream(a), nil
	}),
	agentrpc.Status: asAgent(func(s *Server, _ context.Context, _ *struct{}) (any, error) { return s.status(), nil }),
	agentrpc.ACLResolve: asAgent(func(s *Server, ctx context.Context, a *agentrpc.ACLResolveArgs) (any, error) {
		return s.Backend().resolveHash(ctx, a.SecretHash)
	}),
	agentrpc.ACLBootstrap: asAgent(func(s *Server, ctx context.Context, _ *struct{}) (any, error) {
		return authz.Guard(s.Backend()).ACLBootstrap(ctx)
	}),
	agentrpc.ACLTokenCreate: asCaller(authz.Operator, func(ctx context.Context, g backend.Backend, a *agentrpc.ACLTokenCreateArgs) (any, error) {
		return g.ACLTokenCreate(ctx, a.Request)
	}),
	agentrpc.ACLTokens: asCaller(authz.Operator, func(ctx context.Context, g backend.Backend, _ *agentrpc.ACLCallerArgs) (any, error) {
		return g.ACLTokens(ctx)
	}),
	agentrpc.ACLTokenDelete: asCaller(authz.Operator, func(ctx context.Context, g backend.Backend, a *agentrpc.ACLTokenDeleteArgs) (any, error) {
		return g.ACLTokenDelete(ctx, a.AccessorID)
	}),
	agentrpc.SnapshotSave: asCaller(authz.Operator, func(ctx context.Context, g backend.Backend, a *agentrpc.SnapshotSaveArgs) (any, error) {
		write, err := g.SnapshotSave(ctx, a.Stale)
		if err != nil {
			return nil, err
		}
		// The reply is one message: the client agent streams it on.
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}),
	agentrpc.SnapshotRestore: large(asCaller(authz.Operator, func(ctx context.Context, g backend.Backend, a *agentrpc.SnapshotRestoreArgs) (any, error) {
		return g.SnapshotRestore(ctx, a.Archive)
	})),
	agentrpc.AutopilotHealth: asCaller(authz.ReadCluster, func(ctx context.Context, g backend.Backend, _ *agentrpc.ACLCallerArgs) (any, error) {
		return g.AutopilotHealth(ctx)
	}),
}

// asCaller is a method made as its caller: the header's token's identity,
// which the arguments' token (older agents send it there alone) may not
// contradict; without one, the arguments' token's. A write (agentrpc.Write)
// carries its request ID, checked before anything is done: it goes into
// the log.
func asCaller[A any, P interface {
	*A
	agentrpc.Tokened
}](rule func(context.Context) error, serve func(context.Context, backend.Backend, P) (any, error)) agentEndpoint {
	return agentEndpoint{rule: rule, serve: func(s *Server, ctx context.Context, c caller, decode decoder) (any, error) {
		args := P(new(A))
		if err := decode(args); err != nil {
			return nil, err
		}
		ctx, err := s.callerContext(ctx, c, args.CallerToken())
		if err != nil {
			return nil, err
		}
		if w, ok := any(args).(agentrpc.Write); ok {
			id := w.WriteRequestID()
			if err := api.ValidateRequestID(id); err != nil {
				return nil, err
			}
			if id != "" {
				ctx = api.WithRequestID(ctx, id)
			}
		}
		return serve(ctx, authz.Guard(s.Backend()), args)
	}}
}

// asAgent is a method the agent makes as itself: the transport's proof of
// the peer is what authorizes it.
func asAgent[A any](serve func(*Server, context.Context, *A) (any, error)) agentEndpoint {
	return agentEndpoint{serve: func(s *Server, ctx context.Context, _ caller, decode decoder) (any, error) {
		args := new(A)
		if err := decode(args); err != nil {
			return nil, err
		}
		return serve(s, ctx, args)
	}}
}

// large marks e's arguments as possibly large (see agentEndpoint.large).
func large(e agentEndpoint) agentEndpoint {
	e.large = true
	return e
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
func (s *Server) preauthorize(ctx context.Context, m agentEndpoint) (caller, error) {
	c := caller{token: transport.CallerToken(ctx)}
	if m.rule == nil && c.token == "" {
		return c, nil
	}
	// A header token is resolved whatever the rule: the method's
	// arguments are then checked as its identity (callerContext).
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

// serveAgent serves the client-agent method e, authorized before its
// arguments are decoded (preauthorize).
func (s *Server) serveAgent(ctx context.Context, e agentEndpoint, decode decoder) (any, error) {
	c, err := s.preauthorize(ctx, e)
	if err != nil {
		return nil, err
	}
	return e.serve(s, ctx, c, decode)
}

// callerContext returns ctx carrying the identity a call is made as: the
// header's token's (c), which the arguments' token may not contradict;
// without one, the arguments' token's.
func (s *Server) callerContext(ctx context.Context, c caller, argsToken string) (context.Context, error) {
	if c.token != "" {
		if argsToken != "" && argsToken != c.token {
			return nil, fmt.Errorf("%w: the arguments' token is not the header's", api.ErrInvalid)
		}
		return authz.With(ctx, c.id), nil
	}
	id, err := s.resolver().Resolve(ctx, argsToken)
	if err != nil {
		return nil, err
	}
	return authz.With(ctx, id), nil
}

// upstream is a client agent's event stream from this server: the events
// of a.Types after a.From, the first saying where the stream starts.
func (s *Server) upstream(a *agentrpc.SubscribeArgs) transport.Streamer {
	return func(ctx context.Context, send func(interface{}) error) error {
		ch, start, err := authz.Guard(s.Backend()).Subscribe(authz.With(ctx, authz.Anyone()), a.Types, a.From, a.Heartbeat)
		if err != nil {
			return err
		}
		if err := send(&api.Event{Index: start, EventType: api.EventHeartbeat}); err != nil {
			return err
		}
		for ev := range ch {
			// Encoded once for every client agent's upstream on this
			// server, not once per agent.
			b, err := ev.Bytes(backend.Upstream, func() ([]byte, error) { return transport.Encode(ev.Event) })
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
	}
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
