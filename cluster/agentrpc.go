package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/transport"
)

// wireError keeps an error's api code across the RPC (transport sends
// Code() when an error has one).
type wireError struct {
	code string
	err  error
}

func (e *wireError) Error() string { return e.err.Error() }
func (e *wireError) Unwrap() error { return e.err }
func (e *wireError) Code() string  { return e.code }

func toWire(err error) error {
	if err == nil {
		return nil
	}
	code := api.ErrorCode(err)
	if code == "" {
		code = api.CodeInternal
	}
	return &wireError{code: code, err: err}
}

// handleAgentRPC serves the calls of client agents (api.RPC*) with the
// server's Backend, so a request through a client agent means what it
// means through a server's HTTP API. It reports false for other methods.
func (s *Server) handleAgentRPC(ctx context.Context, method string, dec func(interface{}) error) (reply interface{}, handled bool, err error) {
	b := s.Backend()
	decode := func(v interface{}) error {
		if err := dec(v); err != nil {
			return fmt.Errorf("%w: decode %s: %v", api.ErrMalformed, method, err)
		}
		return nil
	}
	// writeArgs decodes a write's args and returns ctx with the request
	// ID they carry (checked first: it goes into the log).
	writeArgs := func(args interface{}, id *string) (context.Context, error) {
		if err := decode(args); err != nil {
			return nil, err
		}
		if err := api.ValidateRequestID(*id); err != nil {
			return nil, err
		}
		if *id == "" {
			return ctx, nil
		}
		return api.WithRequestID(ctx, *id), nil
	}
	if reply, handled, err := s.handleACLRPC(ctx, method, decode); handled {
		return reply, true, err
	}
	switch method {
	case api.RPCRegister:
		var args api.RegisterArgs
		wctx, err := writeArgs(&args, &args.RequestID)
		if err != nil {
			return nil, true, toWire(err)
		}
		if args.Plugin == nil {
			return nil, true, toWire(fmt.Errorf("%w: plugin is missing", api.ErrInvalid))
		}
		if err := s.rpcAllowed(args.Token, func(a api.Authorizer) bool { return a.CanWrite(args.Plugin.Type) }, "register plugins of type "+args.Plugin.Type); err != nil {
			return nil, true, toWire(err)
		}
		res, err := b.Register(wctx, args.Plugin)
		return res, true, toWire(err)
	case api.RPCDeregister:
		var args api.DeregisterArgs
		wctx, err := writeArgs(&args, &args.RequestID)
		if err != nil {
			return nil, true, toWire(err)
		}
		if err := s.rpcAllowed(args.Token, func(a api.Authorizer) bool { return a.CanWrite(args.Request.Type) }, "deregister plugins of type "+args.Request.Type); err != nil {
			return nil, true, toWire(err)
		}
		res, err := b.Deregister(wctx, args.Request)
		return res, true, toWire(err)
	case api.RPCDeregisterNode:
		var args api.DeregisterNodeArgs
		wctx, err := writeArgs(&args, &args.RequestID)
		if err != nil {
			return nil, true, toWire(err)
		}
		if err := s.rpcAllowed(args.Token, func(a api.Authorizer) bool { return a.CanWriteAll() }, "deregister a node's plugins (write on all types)"); err != nil {
			return nil, true, toWire(err)
		}
		res, err := b.DeregisterNode(wctx, args.NodeID)
		return res, true, toWire(err)
	case api.RPCQuery:
		var q api.Query
		if err := decode(&q); err != nil {
			return nil, true, toWire(err)
		}
		res, err := b.Query(ctx, q)
		if errors.Is(err, api.ErrNotFound) && res != nil {
			res.NotFound = err.Error() // in the reply: the index crosses too
			return res, true, nil
		}
		if err != nil {
			return nil, true, toWire(err)
		}
		return res, true, nil
	case api.RPCSnapshotSave:
		var args api.SnapshotSaveArgs
		if err := decode(&args); err != nil {
			return nil, true, toWire(err)
		}
		if err := s.rpcAllowed(args.Token, api.Authorizer.IsOperator, "take snapshots (operator)"); err != nil {
			return nil, true, toWire(err)
		}
		write, err := b.SnapshotSave(ctx, args.Stale)
		if err != nil {
			return nil, true, toWire(err)
		}
		// The reply is one message: the client agent streams it on.
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			return nil, true, toWire(err)
		}
		return buf.Bytes(), true, nil
	case api.RPCSnapshotRestore:
		var args api.SnapshotRestoreArgs
		if err := decode(&args); err != nil {
			return nil, true, toWire(err)
		}
		if err := s.rpcAllowed(args.Token, api.Authorizer.IsOperator, "restore snapshots (operator)"); err != nil {
			return nil, true, toWire(err)
		}
		res, err := b.SnapshotRestore(api.WithRequestID(ctx, args.RequestID), args.Archive)
		return res, true, toWire(err)
	case api.RPCAutopilotHealth:
		var args api.ACLCallerArgs
		if err := decode(&args); err != nil {
			return nil, true, toWire(err)
		}
		if err := s.rpcAllowed(args.Token, api.Authorizer.CanReadAny, "see the servers' health"); err != nil {
			return nil, true, toWire(err)
		}
		h, err := b.AutopilotHealth(ctx)
		return h, true, toWire(err)
	case api.RPCStatus:
		var none struct{}
		if err := decode(&none); err != nil {
			return nil, true, toWire(err)
		}
		return s.status(), true, nil
	case api.RPCSubscribe:
		var args api.SubscribeArgs
		if err := decode(&args); err != nil {
			return nil, true, toWire(err)
		}
		return transport.Streamer(func(ctx context.Context, send func(interface{}) error) error {
			ch, start, err := b.Subscribe(ctx, args.Types, args.From, args.Heartbeat)
			if err != nil {
				return toWire(err)
			}
			// The first event says where the stream starts.
			if err := send(&api.Event{Index: start, EventType: api.EventHeartbeat}); err != nil {
				return err
			}
			for ev := range ch {
				if err := send(ev); err != nil {
					return err
				}
			}
			if ctx.Err() == nil {
				return toWire(unknown(CodeShutdown, ErrShutdown))
			}
			return nil
		}), true, nil
	}
	return nil, false, nil
}

// status is this server's view of the Raft cluster, for client agents.
func (s *Server) status() *api.StatusReply {
	out := &api.StatusReply{Leader: s.Leader(), LeaderID: s.LeaderID()}
	if servers, err := s.RaftConfiguration(); err == nil {
		for _, srv := range servers {
			out.Peers = append(out.Peers, string(srv.Address))
			out.Voters = append(out.Voters, string(srv.ID))
		}
	}
	return out
}
