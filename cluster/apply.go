package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster/raftx"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/tracing"
	"github.com/plugreg/plugreg/transport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Apply proposes cmd to the cluster: through raft on the leader, forwarded
// over RPC from a follower. It returns once the entry is applied on the
// node that proposed it; the write path (write.go)
// then waits for this node's own apply. A failure is an *Error whose Outcome says whether the write may
// have applied.
func (s *Server) Apply(ctx context.Context, cmd []byte) (*fsm.ApplyResult, error) {
	for attempt := 0; ; attempt++ {
		if s.IsLeader() {
			res, err := s.applyLocal(ctx, cmd)
			var ce *api.Error
			if errors.As(err, &ce) && ce.Code() == api.CodeNotLeader && attempt < 3 {
				continue // lost leadership before enqueueing: forward instead
			}
			return res, err
		}
		leader, err := s.waitForLeader(ctx)
		if err != nil {
			return nil, err
		}
		fctx, span := s.cfg.Tracer.StartChild(ctx, "plugreg.forward", trace.SpanKindClient)
		if span.IsRecording() {
			span.SetAttributes(attribute.String("plugreg.leader", leader), attribute.Int("plugreg.attempt", attempt))
		}
		res, err := s.forward(fctx, leader, cmd)
		tracing.End(span, err)
		var ce *api.Error
		if errors.As(err, &ce) && ce.Outcome() == api.NotApplied && attempt < 3 {
			// The leader moved or was unreachable; nothing was applied.
			select {
			case <-ctx.Done():
				return nil, notApplied(api.CodeNoLeader, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		return res, err
	}
}

func (s *Server) applyLocal(ctx context.Context, cmd []byte) (*fsm.ApplyResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, notApplied(api.CodeTimeout, err)
	}
	// No goroutine per write to watch ctx: raft resolves every future
	// within the enqueue timeout plus, once enqueued, a commit or the
	// leader lease running out (ErrLeadershipLost), both far shorter than
	// any request deadline.
	ctx, span := s.cfg.Tracer.StartChild(ctx, "raft.apply", trace.SpanKindInternal)
	res, err := s.applyOutcome(s.propose(ctx, cmd))
	endApplySpan(span, res, err)
	return res, err
}

// propose hands cmd to raft, with the trace of ctx's span in the entry's
// extensions when it is sampled (every server's apply joins it).
func (s *Server) propose(ctx context.Context, cmd []byte) raft.ApplyFuture {
	if ext := tracing.LogExtension(ctx); ext != nil {
		return s.raft.ApplyLog(raft.Log{Data: cmd, Extensions: ext}, s.cfg.ApplyTimeout)
	}
	return s.raft.Apply(cmd, s.cfg.ApplyTimeout)
}

// endApplySpan ends a raft.apply span with the entry's index.
func endApplySpan(span trace.Span, res *fsm.ApplyResult, err error) {
	if res != nil && span.IsRecording() {
		span.SetAttributes(attribute.Int64("raft.index", int64(res.Index)))
	}
	tracing.End(span, err)
}

// applyOutcome waits for f and returns the FSM's result, or the error in
// the form forwarding keeps (its Outcome says whether it may have
// applied).
func (s *Server) applyOutcome(f raft.ApplyFuture) (*fsm.ApplyResult, error) {
	err := raftx.Await(f, s.raftGone)
	switch {
	case err == nil:
	case errors.Is(err, raft.ErrNotLeader):
		return nil, notApplied(api.CodeNotLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return nil, notApplied(api.CodeEnqueueTimeout, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		if errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return nil, notApplied(api.CodeNotLeader, err) // refused before enqueue
		}
		return nil, unknown(api.CodeLeadershipLost, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return nil, unknown(api.CodeShutdown, err)
	default:
		return nil, unknown(api.CodeLeadershipLost, err)
	}
	res, ok := f.Response().(*fsm.ApplyResult)
	if !ok {
		return nil, fmt.Errorf("apply: unexpected response %T", f.Response())
	}
	return res, nil
}

// waitForLeader returns the leader's address, waiting up to two election
// timeouts (or ctx) for one to be elected.
func (s *Server) waitForLeader(ctx context.Context) (string, error) {
	deadline := time.Now().Add(2*s.electionTimeout() + 500*time.Millisecond)
	for {
		if addr := s.Leader(); addr != "" {
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", notApplied(api.CodeNoLeader, ErrNoLeader)
		}
		select {
		case <-ctx.Done():
			return "", notApplied(api.CodeNoLeader, fmt.Errorf("%w: %v", ErrNoLeader, ctx.Err()))
		case <-s.ctx.Done():
			return "", notApplied(api.CodeShutdown, ErrShutdown)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) electionTimeout() time.Duration {
	if s.cfg.ElectionTimeout > 0 {
		return s.cfg.ElectionTimeout
	}
	return raft.DefaultConfig().ElectionTimeout
}

func (s *Server) forwardApply(ctx context.Context, leader string, cmd []byte) (*fsm.ApplyResult, error) {
	var reply applyReply
	err := s.pool.Call(ctx, leader, rpcApply, &applyArgs{Cmd: cmd}, &reply)
	if err != nil {
		return nil, rpcError(err)
	}
	return reply.applied(), nil
}

// rpcError is an RPC's failure as an api error; a leader that could not
// be dialled is no leader (not applied).
func rpcError(err error) error { return transport.CallError(err, api.CodeNoLeader) }

// ReadMeta describes the state a read returned.
type ReadMeta struct {
	KnownLeader bool
	LastContact time.Duration // since the leader was last heard; 0 on the leader, -1 never
}

// Read returns this node's state after applying the consistency rule.
func (s *Server) Read(ctx context.Context, c api.Consistency) (*fsm.State, ReadMeta, error) {
	meta := ReadMeta{KnownLeader: s.Leader() != "", LastContact: s.LastContact()}
	if c == api.Stale {
		return s.fsm.State(), meta, nil
	}
	idx, err := s.ReadIndex(ctx)
	if err != nil {
		return nil, meta, err
	}
	if err := s.WaitApplied(ctx, idx); err != nil {
		return nil, meta, err
	}
	return s.fsm.State(), meta, nil
}

// ReadIndex returns an index such that this node's state at or past it
// reflects every write committed before the call: the leader's commit
// index, confirmed by a round of heartbeats (VerifyLeader).
func (s *Server) ReadIndex(ctx context.Context) (uint64, error) {
	return leaderCall(ctx, s, func() (uint64, error) { return s.readIndexLocal(ctx) }, rpcReadIndex, struct{}{})
}

// leaderCall runs local on the leader, or calls method with args on the
// leader over RPC from a follower, and tries again (three more times, 50
// ms apart) while the answer says nothing was done: the leader moved or
// was unreachable, or has not taken office yet. The one retry rule of the
// leader-only requests that are safe to repeat (read indexes, renewals);
// writes have Apply's, which must not repeat what may have applied.
func leaderCall[T any](ctx context.Context, s *Server, local func() (T, error), method string, args any) (T, error) {
	for attempt := 0; ; attempt++ {
		var (
			res T
			err error
		)
		if s.IsLeader() {
			res, err = local()
		} else {
			leader, werr := s.waitForLeader(ctx)
			if werr != nil {
				return res, werr
			}
			if err = s.pool.Call(ctx, leader, method, args, &res); err != nil {
				err = rpcError(err)
			}
		}
		var ce *api.Error
		if err == nil || !errors.As(err, &ce) || ce.Outcome() != api.NotApplied || attempt >= 3 {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Server) readIndexLocal(ctx context.Context) (uint64, error) {
	if !s.IsLeader() {
		return 0, notApplied(api.CodeNotLeader, raft.ErrNotLeader)
	}
	if !s.leaderReady.Load() {
		return 0, notApplied(api.CodeNotReady, errors.New("new leader has not yet committed in its term"))
	}
	if err := ctx.Err(); err != nil {
		return 0, notApplied(api.CodeTimeout, err)
	}
	idx := s.raft.CommitIndex()
	// As for writes, no goroutine per read to watch ctx: raft resolves the
	// future after one round of heartbeats, or when the leader steps down
	// for want of a quorum (its lease), well inside any request deadline.
	if err := s.raft.VerifyLeader().Error(); err != nil {
		return 0, notApplied(api.CodeNotLeader, err)
	}
	return idx, nil
}

// WaitApplied returns once this node's FSM reflects every entry up to
// index. Raft never hands no-op and barrier entries to the FSM, so once
// raft has handed over index, the wait is for the last entry at or below
// index that the FSM does see.
func (s *Server) WaitApplied(ctx context.Context, index uint64) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		applied := s.fsm.State().Index()
		if applied >= index {
			return nil
		}
		if s.raft.AppliedIndex() >= index && s.lastFSMEntry(applied, index) <= applied {
			return nil
		}
		select {
		case <-ctx.Done():
			return unknown(api.CodeTimeout, fmt.Errorf("waiting to apply index %d (at %d): %w", index, applied, ctx.Err()))
		case <-s.ctx.Done():
			return unknown(api.CodeShutdown, ErrShutdown)
		case <-t.C:
		}
	}
}

// lastFSMEntry returns the highest index in (from, to] whose entry the FSM
// is handed (commands and configuration), or from when there is none.
func (s *Server) lastFSMEntry(from, to uint64) uint64 {
	for i := to; i > from; i-- {
		var l raft.Log
		if err := s.logs.GetLog(i, &l); err != nil {
			return i // unknown here: assume the FSM must see it
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i
		}
	}
	return from
}
