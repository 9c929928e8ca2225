package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/authz"
	"github.com/plugreg/plugreg/transport"
)

// handleAgentRPC serves the calls of client agents (api.RPC*) with the
// server's Backend behind authz.Guard, so a request through a client agent
// means what it means through a server's HTTP API and is checked by the
// same rules: writes and operator calls as the token they carry (the HTTP
// caller's, or the agent's own), reads as the agent (the transport vouches
// for it; the agent cuts what it forwards to its own callers' tokens). It
// reports false for other methods.
func (s *Server) handleAgentRPC(ctx context.Context, method string, dec func(interface{}) error) (reply interface{}, handled bool, err error) {
	b := s.Backend()
	g := authz.Guard(b)
	decode := func(v interface{}) error {
		if err := dec(v); err != nil {
			return fmt.Errorf("%w: decode %s: %v", api.ErrMalformed, method, err)
		}
		return nil
	}
	// as decodes args and returns ctx carrying the identity of the token
	// they hold.
	as := func(args interface{}, token *string) (context.Context, error) {
		if err := decode(args); err != nil {
			return nil, err
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
			return nil, true, api.ToWire(err)
		}
		if args.Plugin == nil {
			return nil, true, api.ToWire(fmt.Errorf("%w: plugin is missing", api.ErrInvalid))
		}
		// Validated once, where the command is encoded (fsm.EncodeCommand),
		// as for the other writes below: never twice on the write path.
		res, err := g.Register(wctx, args.Plugin)
		return res, true, api.ToWire(err)
	case agentrpc.Deregister:
		var args agentrpc.DeregisterArgs
		wctx, err := write(&args, &args.Token, &args.RequestID)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		res, err := g.Deregister(wctx, args.Request)
		return res, true, api.ToWire(err)
	case agentrpc.DeregisterNode:
		var args agentrpc.DeregisterNodeArgs
		wctx, err := write(&args, &args.Token, &args.RequestID)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		res, err := g.DeregisterNode(wctx, args.NodeID)
		return res, true, api.ToWire(err)
	case agentrpc.Renew:
		var args agentrpc.RenewArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		if err := args.Request.Validate(); err != nil {
			return nil, true, api.ToWire(err)
		}
		res, err := g.Renew(actx, args.Request)
		return res, true, api.ToWire(err)
	case agentrpc.Query:
		var q api.Query
		if err := decode(&q); err != nil {
			return nil, true, api.ToWire(err)
		}
		res, err := g.Query(anyone, q)
		if errors.Is(err, api.ErrNotFound) && res != nil {
			res.NotFound = err.Error() // in the reply: the index crosses too
			return res, true, nil
		}
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		return res, true, nil
	case agentrpc.SnapshotSave:
		var args agentrpc.SnapshotSaveArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		write, err := g.SnapshotSave(actx, args.Stale)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		// The reply is one message: the client agent streams it on.
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			return nil, true, api.ToWire(err)
		}
		return buf.Bytes(), true, nil
	case agentrpc.SnapshotRestore:
		var args agentrpc.SnapshotRestoreArgs
		wctx, err := write(&args, &args.Token, &args.RequestID)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		res, err := g.SnapshotRestore(wctx, args.Archive)
		return res, true, api.ToWire(err)
	case agentrpc.AutopilotHealth:
		var args agentrpc.ACLCallerArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		h, err := g.AutopilotHealth(actx)
		return h, true, api.ToWire(err)
	case agentrpc.Status:
		var none struct{}
		if err := decode(&none); err != nil {
			return nil, true, api.ToWire(err)
		}
		return s.status(), true, nil
	case agentrpc.Subscribe:
		var args agentrpc.SubscribeArgs
		if err := decode(&args); err != nil {
			return nil, true, api.ToWire(err)
		}
		return transport.Streamer(func(ctx context.Context, send func(interface{}) error) error {
			ch, start, err := g.Subscribe(authz.With(ctx, authz.Anyone()), args.Types, args.From, args.Heartbeat)
			if err != nil {
				return api.ToWire(err)
			}
			// The first event says where the stream starts.
			if err := send(&api.Event{Index: start, EventType: api.EventHeartbeat}); err != nil {
				return err
			}
			for ev := range ch {
				if err := send(ev.Event); err != nil {
					return err
				}
			}
			if ctx.Err() == nil {
				return api.ToWire(unknown(api.CodeShutdown, ErrShutdown))
			}
			return nil
		}), true, nil
	case agentrpc.ACLResolve:
		var args agentrpc.ACLResolveArgs
		if err := decode(&args); err != nil {
			return nil, true, api.ToWire(err)
		}
		t, err := b.resolveHash(args.SecretHash)
		return t, true, api.ToWire(err)
	case agentrpc.ACLBootstrap:
		var none struct{}
		if err := decode(&none); err != nil {
			return nil, true, api.ToWire(err)
		}
		t, err := g.ACLBootstrap(ctx)
		return t, true, api.ToWire(err)
	case agentrpc.ACLTokenCreate:
		var args agentrpc.ACLTokenCreateArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		t, err := g.ACLTokenCreate(actx, args.Request)
		return t, true, api.ToWire(err)
	case agentrpc.ACLTokens:
		var args agentrpc.ACLCallerArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		ts, err := g.ACLTokens(actx)
		return ts, true, api.ToWire(err)
	case agentrpc.ACLTokenDelete:
		var args agentrpc.ACLTokenDeleteArgs
		actx, err := as(&args, &args.Token)
		if err != nil {
			return nil, true, api.ToWire(err)
		}
		res, err := g.ACLTokenDelete(actx, args.AccessorID)
		return res, true, api.ToWire(err)
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
