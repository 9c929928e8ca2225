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
	// served from RPCVersion rpcVersionBatch on (forward.go).
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

// serverOnly are the internal methods only servers call: raw commands
// for the log, a server's removal, and Raft's own state. A peer that did
// not prove the server identity (a client agent's certificate, where the
// port asks for proof: transport.Peer) is refused before its arguments
// are read. Client agents have the Agent.* methods, which check tokens.
var serverOnly = map[string]bool{
	rpcApply: true, rpcApplyBatch: true, rpcReadIndex: true, rpcLeave: true, rpcRaftStats: true, rpcPeers: true,
	rpcRenew:     true, // authorized where it came in (authz.Renew); client agents have Agent.Renew
	rpcAckReport: true,
}

// serversOnly refuses a serverOnly method to a peer that did not prove
// the server identity, before its arguments are read.
func serversOnly(ctx context.Context, method string) error {
	if serverOnly[method] && !transport.PeerFrom(ctx).Server {
		return fmt.Errorf("%w: %s is for servers of this cluster, and this peer's certificate does not name the server identity", api.ErrPermissionDenied, method)
	}
	return nil
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
	if _, ok := agentMethods[method]; ok {
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

func (s *Server) serveRPC(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
	// The server port opens before Raft does (Raft needs its stream
	// layer), and peers that still think this node leads forward to it
	// as soon as it is back: answer "not ready" until Raft is up, which
	// callers treat as not applied and retry.
	if method == rpcAckReport {
		// Answered before Raft runs: a restarting server asks before
		// its own Raft starts, and its peers may be starting too.
		if err := serversOnly(ctx, method); err != nil {
			return nil, err
		}
		return s.serveAckReport(dec)
	}
	if !s.rpcReady.Load() {
		return nil, notApplied(api.CodeStarting, ErrStarting)
	}
	if err := serversOnly(ctx, method); err != nil {
		return nil, err
	}
	if reply, ok, err := s.handleAgentRPC(ctx, method, dec); ok {
		return reply, err
	}
	switch method {
	case rpcApply:
		var args applyArgs
		if err := dec(&args); err != nil {
			return nil, fmt.Errorf("decode %s: %w", method, err)
		}
		// Validate before proposing: a bad entry must never reach the
		// log, even from a misbehaving peer, and what is proposed is
		// this node's encoding of it, not the peer's bytes.
		cmd, err := fsm.ReencodeCommand(args.Cmd)
		if err != nil {
			return new(applyReply).reject(err), nil
		}
		if !s.IsLeader() {
			return nil, notApplied(api.CodeNotLeader, errors.New("not the leader"))
		}
		res, err := s.applyLocal(ctx, cmd)
		if err != nil {
			return nil, err
		}
		reply := replyOf(res)
		return &reply, nil
	case rpcApplyBatch:
		var args applyBatchArgs
		if err := dec(&args); err != nil {
			return nil, fmt.Errorf("decode %s: %w", method, err)
		}
		if len(args.Cmds) > maxForwardBatch {
			return nil, fmt.Errorf("%s: %d commands, at most %d", method, len(args.Cmds), maxForwardBatch)
		}
		if !s.IsLeader() {
			return nil, notApplied(api.CodeNotLeader, errors.New("not the leader"))
		}
		return s.applyBatchLocal(ctx, args.Cmds, args.Traces), nil
	case rpcRenew:
		var req api.RenewRequest
		if err := dec(&req); err != nil {
			return nil, fmt.Errorf("decode %s: %w", method, err)
		}
		if err := req.Validate(); err != nil {
			return nil, err
		}
		res, err := s.renewLocal(req)
		if err != nil {
			return nil, err
		}
		return &res, nil
	case rpcReadIndex:
		var none struct{}
		if err := dec(&none); err != nil {
			return nil, err
		}
		return s.readIndexLocal(ctx)
	case rpcLeave:
		var args leaveArgs
		if err := dec(&args); err != nil {
			return nil, fmt.Errorf("decode %s: %w", method, err)
		}
		if !s.IsLeader() {
			return nil, notApplied(api.CodeNotLeader, errors.New("not the leader"))
		}
		if err := s.removeLeaving(args.ID); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	case rpcRaftStats:
		var none struct{}
		if err := dec(&none); err != nil {
			return nil, err
		}
		return s.raftStats(), nil
	case rpcPeers:
		var none struct{}
		if err := dec(&none); err != nil {
			return nil, err
		}
		// An error must cross as an error: bootstrap reads an empty
		// answer as "this peer has no cluster".
		return s.Peers()
	}
	return nil, fmt.Errorf("unknown rpc method %q", method)
}
