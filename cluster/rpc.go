package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/tracing"
	"github.com/plugreg/plugreg/transport"
	"go.opentelemetry.io/otel/trace"
)

// Internal RPC methods served on the server port.
const (
	rpcApply = "Apply" // applyArgs -> applyReply; leader only
	// rpcApplyBatch: applyBatchArgs -> applyBatchReply; leader only;
	// served from RPCVersion rpcVersionBatch on (propose.go).
	rpcApplyBatch = "ApplyBatch"
	rpcReadIndex  = "ReadIndex" // {} -> uint64; leader only
	rpcPeers      = "Peers"     // {} -> []string
	rpcLeave      = "Leave"     // leaveArgs -> {}; leader only
)

// leaveArgs asks the leader to remove a server that is leaving gracefully.
type leaveArgs struct {
	ID string
}

type applyArgs struct {
	Cmd []byte
}

type applyReply struct {
	Index     uint64
	Result    api.Result
	Removed   int
	Duplicate bool
	Rejected  string // the FSM rejected the command (deterministically): its message
	// RejectedCode names the rejection's sentinel (see rejections); empty
	// from older binaries, which meant invalid.
	RejectedCode string `codec:",omitempty"`
	// ErrCode, ErrOutcome and ErrMsg: this command of an ApplyBatch
	// failed: an api.WireError (fail, failure), spelled out rather
	// than embedded because these are its names on the wire, which older
	// leaders send and older followers read (an embedded WireError would
	// be Code, Outcome and Msg, and an older follower would take a failed
	// command for one applied at index 0). Never set in a single Apply's
	// reply.
	ErrCode    string      `codec:",omitempty"`
	ErrOutcome api.Outcome `codec:",omitempty"` // omitted before 2026-11-25: the code's
	ErrMsg     string      `codec:",omitempty"`
	// Refused: the writes of a host sync its conditions left alone
	// (fsm.ApplyResult.Refused); only a leader that applies host syncs
	// sends it, and only for one.
	Refused []int `codec:",omitempty"`
}

// replyOf is res in its wire form.
func replyOf(res *fsm.ApplyResult) applyReply {
	r := applyReply{Index: res.Index, Result: res.Result, Removed: res.Removed, Duplicate: res.Duplicate, Refused: res.Refused}
	if res.Err != nil {
		r.reject(res.Err)
	}
	return r
}

// applied is what a reply says the FSM answered.
func (r *applyReply) applied() *fsm.ApplyResult {
	res := &fsm.ApplyResult{Index: r.Index, Result: r.Result, Removed: r.Removed, Duplicate: r.Duplicate, Refused: r.Refused}
	if r.Rejected != "" {
		res.Err = rejection(r.RejectedCode, r.Rejected)
	}
	return res
}

// reject records the FSM's refusal err in the reply, in its wire form.
func (r *applyReply) reject(err error) *applyReply {
	r.Rejected, r.RejectedCode = err.Error(), rejectionCode(err)
	return r
}

// serverEndpoint is one method of the server port that only servers
// call: raw commands for the log, a server's removal, Raft's own state,
// renewals passed on to the leader (authorized where they came in,
// authz.Renew; client agents have agentrpc.Renew). A peer that did not
// prove the server identity (a client agent's certificate, where the port
// asks for proof: transport.Peer) is refused before its arguments are
// read.
type serverEndpoint struct {
	// beforeRaft: answered while Raft is still starting (every other
	// method answers "not ready" until it runs).
	beforeRaft bool
	serve      func(s *Server, ctx context.Context, decode decoder) (any, error)
}

var serverEndpoints = map[string]serverEndpoint{
	rpcApply: decoded(func(s *Server, ctx context.Context, a *applyArgs) (any, error) {
		return s.applyForwarded(ctx, a.Cmd)
	}),
	rpcApplyBatch: decoded(func(s *Server, ctx context.Context, a *applyBatchArgs) (any, error) {
		if len(a.Cmds) > maxForwardBatch {
			return nil, fmt.Errorf("%w: %d commands, at most %d", api.ErrTooLarge, len(a.Cmds), maxForwardBatch)
		}
		if !s.IsLeader() {
			return nil, notApplied(api.CodeNotLeader, errors.New("not the leader"))
		}
		return s.applyBatchLocal(ctx, a.Cmds, a.Traces), nil
	}),
	rpcRenew: decoded(func(s *Server, _ context.Context, req *api.RenewRequest) (any, error) {
		if err := req.Validate(); err != nil {
			return nil, err
		}
		res, err := s.renewLocal(*req)
		if err != nil {
			return nil, err
		}
		return &res, nil
	}),
	rpcReadIndex: decoded(func(s *Server, ctx context.Context, _ *struct{}) (any, error) {
		return s.readIndexLocal(ctx)
	}),
	rpcLeave: decoded(func(s *Server, _ context.Context, a *leaveArgs) (any, error) {
		if !s.IsLeader() {
			return nil, notApplied(api.CodeNotLeader, errors.New("not the leader"))
		}
		if err := s.removeLeaving(a.ID); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	}),
	rpcRaftStats: decoded(func(s *Server, _ context.Context, _ *struct{}) (any, error) {
		return s.raftStats(), nil
	}),
	rpcPeers: decoded(func(s *Server, _ context.Context, _ *struct{}) (any, error) {
		// An error must cross as an error: bootstrap reads an empty
		// answer as "this peer has no cluster".
		return s.Peers()
	}),
	// Answered before Raft runs: a restarting server asks before its own
	// Raft starts, and its peers may be starting too.
	rpcAckReport: {beforeRaft: true, serve: decoded(func(s *Server, _ context.Context, rep *ackReport) (any, error) {
		return s.serveAckReport(rep)
	}).serve},
}

// decoded is a server method whose arguments decode into an A.
func decoded[A any](serve func(*Server, context.Context, *A) (any, error)) serverEndpoint {
	return serverEndpoint{serve: func(s *Server, ctx context.Context, decode decoder) (any, error) {
		args := new(A)
		if err := decode(args); err != nil {
			return nil, err
		}
		return serve(s, ctx, args)
	}}
}

// rpcRequestBound is how much of a request a peer may make a server read,
// by method: an archive to restore (the HTTP API takes up to 512 MiB), a
// batch of forwarded commands (one may be a restore's, up to 60 MiB), the
// small arguments of the other client-agent methods (maxAgentArgs), and
// transport's 64 MiB for everything else.
func rpcRequestBound(method string) int64 {
	switch method {
	case agentrpc.SnapshotRestore:
		return 520 << 20
	case rpcApplyBatch:
		return 128 << 20
	}
	if _, ok := agentEndpoints[method]; ok {
		return maxAgentArgs
	}
	return transport.DefaultMaxRequestBytes
}

// handleRPC serves one internal RPC, in a span of the caller's trace when
// the request carries one.
func (s *Server) handleRPC(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
	ctx, span := s.cfg.Tracer.StartChild(ctx, "rpc "+method, trace.SpanKindServer)
	reply, err := s.serveRPC(ctx, method, dec)
	tracing.End(span, err)
	return reply, err
}

// serveRPC dispatches one call of the server port to its endpoint (the
// transport answers its error as api.ToWire makes it).
func (s *Server) serveRPC(ctx context.Context, method string, dec decoder) (any, error) {
	decode := func(v any) error {
		if err := dec(v); err != nil {
			return fmt.Errorf("%w: decode %s: %v", api.ErrMalformed, method, err)
		}
		return nil
	}
	se, isServers := serverEndpoints[method]
	// The server port opens before Raft does (Raft needs its stream
	// layer), and peers that still think this server leads forward to it
	// as soon as it is back: "not ready" until Raft is up, which callers
	// treat as not applied and retry.
	if !s.rpcReady.Load() && !(isServers && se.beforeRaft) {
		return nil, notApplied(api.CodeStarting, ErrStarting)
	}
	if isServers {
		if !transport.PeerFrom(ctx).Server {
			return nil, fmt.Errorf("%w: %s is for servers of this cluster, and this peer's certificate does not name the server identity", api.ErrPermissionDenied, method)
		}
		return se.serve(s, ctx, decode)
	}
	if ae, ok := agentEndpoints[method]; ok {
		return s.serveAgent(ctx, ae, decode)
	}
	return nil, fmt.Errorf("%w: unknown rpc method %q", api.ErrUnsupported, method)
}
