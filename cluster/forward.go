package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tracing"
	"go.opentelemetry.io/otel/trace"
)

// Forwarded writes travel in batches. Every write a follower forwards
// used to be one RPC to the leader: a header, the arguments, a status and
// a reply, each encoded, written, flushed and read on its own, on both
// sides. Under load many writes wait to be forwarded at once; the
// forwarder sends whatever is waiting as one ApplyBatch RPC, and the
// leader hands all of them to raft before waiting for any (raft commits
// them in one batch anyway). A lone write goes out at once, alone, as it
// always did: batching adds no wait, it only shares the trip among the
// writes that were queued behind a trip already under way (group commit).

// rpcVersionBatch is the RPCVersion (gossip.Meta) of servers that serve
// ApplyBatch. A follower batches only to a leader that says so, so in a
// rolling upgrade older leaders keep getting single Apply calls.
const rpcVersionBatch = 1

const (
	// forwardSenders bounds the batches in flight to the leader at once.
	forwardSenders = 4
	// maxForwardBatch bounds the writes in one batch (raft's default
	// MaxAppendEntries: one batch fits one AppendEntries).
	maxForwardBatch = 64
)

type applyBatchArgs struct {
	Cmds [][]byte
	// Traces are the commands' traces, by position (a traced write's
	// forward span), when any is traced; older leaders ignore them.
	Traces []tracing.Context `codec:",omitempty"`
}

type applyBatchReply struct {
	Replies []applyReply // one per command, in order
}

// fwdItem is one write waiting to be forwarded.
type fwdItem struct {
	ctx    context.Context
	leader string
	cmd    []byte
	done   chan fwdResult // buffered: the sender never blocks on it
}

type fwdResult struct {
	res *fsm.ApplyResult
	err error
}

// forward sends cmd to leader through the batching senders and waits for
// its outcome. Giving up on ctx while the write is on its way reports an
// unknown outcome, as an abandoned single RPC does.
func (s *Server) forward(ctx context.Context, leader string, cmd []byte) (*fsm.ApplyResult, error) {
	if !s.servesBatches(leader) {
		return s.forwardApply(ctx, leader, cmd)
	}
	it := &fwdItem{ctx: ctx, leader: leader, cmd: cmd, done: make(chan fwdResult, 1)}
	select {
	case s.fwdQueue <- it:
	case <-ctx.Done():
		return nil, notApplied(api.CodeTimeout, ctx.Err())
	case <-s.ctx.Done():
		return nil, notApplied(api.CodeShutdown, ErrShutdown)
	}
	select {
	case r := <-it.done:
		return r.res, r.err
	case <-ctx.Done():
		return nil, unknown(api.CodeTimeout, ctx.Err())
	case <-s.ctx.Done():
		return nil, unknown(api.CodeShutdown, ErrShutdown)
	}
}

// runForwarder is one sender: it takes the next waiting write, and with
// it every write queued behind it for the same leader, and sends them.
func (s *Server) runForwarder() {
	var held *fwdItem // a write for another leader, taken while draining
	for {
		first := held
		held = nil
		if first == nil {
			select {
			case first = <-s.fwdQueue:
			case <-s.ctx.Done():
				s.failQueued()
				return
			}
		}
		batch := []*fwdItem{first}
	drain:
		for len(batch) < maxForwardBatch {
			select {
			case it := <-s.fwdQueue:
				if it.leader != first.leader {
					held = it
					break drain
				}
				batch = append(batch, it)
			default:
				break drain
			}
		}
		s.sendBatch(batch)
	}
}

// failQueued answers the writes still queued at shutdown: none was sent.
func (s *Server) failQueued() {
	for {
		select {
		case it := <-s.fwdQueue:
			it.done <- fwdResult{err: notApplied(api.CodeShutdown, ErrShutdown)}
		default:
			return
		}
	}
}

// sendBatch forwards batch (all to one leader) and answers every item.
func (s *Server) sendBatch(batch []*fwdItem) {
	live := batch[:0]
	for _, it := range batch {
		if err := it.ctx.Err(); err != nil {
			it.done <- fwdResult{err: notApplied(api.CodeTimeout, err)}
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	leader := live[0].leader
	if len(live) == 1 {
		res, err := s.forwardApply(live[0].ctx, leader, live[0].cmd)
		live[0].done <- fwdResult{res, err}
		return
	}
	// The batch lives as long as its longest-lived write; a write whose
	// own deadline passes first gives up on its own (forward).
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var deadline time.Time
	for _, it := range live {
		d, ok := it.ctx.Deadline()
		if !ok {
			deadline = time.Time{}
			break
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(s.ctx, deadline)
		defer cancel()
	}
	args := &applyBatchArgs{Cmds: make([][]byte, len(live))}
	for i, it := range live {
		args.Cmds[i] = it.cmd
		if tc := tracing.ContextOf(it.ctx); tc.Traceparent != "" {
			if args.Traces == nil {
				args.Traces = make([]tracing.Context, len(live))
			}
			args.Traces[i] = tc
		}
	}
	s.fwdBatches.Add(1)
	s.fwdBatched.Add(int64(len(live)))
	var reply applyBatchReply
	if err := s.pool.Call(ctx, leader, rpcApplyBatch, args, &reply); err != nil {
		err = rpcError(err)
		for _, it := range live {
			it.done <- fwdResult{err: err}
		}
		return
	}
	if len(reply.Replies) != len(live) {
		err := unknown(api.CodeForwardFailed, fmt.Errorf("apply batch: %d replies to %d commands", len(reply.Replies), len(live)))
		for _, it := range live {
			it.done <- fwdResult{err: err}
		}
		return
	}
	for i, it := range live {
		it.done <- reply.Replies[i].result()
	}
}

// ForwardStats counts the writes this node forwarded to the leader in
// ApplyBatch RPCs, and those RPCs.
type ForwardStats struct {
	Batches, BatchedWrites int64
}

// ForwardStats returns the counts since start.
func (s *Server) ForwardStats() ForwardStats {
	return ForwardStats{Batches: s.fwdBatches.Load(), BatchedWrites: s.fwdBatched.Load()}
}

// batchSupport is what servesBatches last learned of one server.
type batchSupport struct {
	addr    string
	ok      bool
	checked time.Time
}

// servesBatches reports whether the server at raft address addr says in
// its gossip meta that it serves ApplyBatch. The answer is kept for a
// second: the member list is not read on every write.
func (s *Server) servesBatches(addr string) bool {
	if b := s.batchSupport.Load(); b != nil && b.addr == addr && time.Since(b.checked) < time.Second {
		return b.ok
	}
	b := &batchSupport{addr: addr, checked: time.Now()}
	if s.gossip == nil { // still starting
		return false
	}
	for _, m := range s.gossip.Members() {
		if m.Meta.RaftAddr == addr {
			b.ok = m.Status == gossip.StatusAlive && m.Meta.RPCVersion >= rpcVersionBatch
			break
		}
	}
	s.batchSupport.Store(b)
	return b.ok
}

// result turns one reply of a forwarded write back into what Apply
// returns.
func (r *applyReply) result() fwdResult {
	if w := r.failure(); w != nil {
		return fwdResult{err: w.Err()}
	}
	return fwdResult{res: r.applied()}
}

// applyBatchLocal proposes every command of a forwarded batch to raft,
// then waits for them all: one reply per command, each as the single
// Apply RPC would have answered it (a command that fails validation is
// rejected and never reaches the log; the others do not depend on it).
func (s *Server) applyBatchLocal(ctx context.Context, cmds [][]byte, traces []tracing.Context) *applyBatchReply {
	out := &applyBatchReply{Replies: make([]applyReply, len(cmds))}
	futures := make([]raft.ApplyFuture, len(cmds))
	var spans []trace.Span // each traced command's raft.apply, by position
	for i, raw := range cmds {
		cmd, err := fsm.ReencodeCommand(raw) // see rpcApply
		if err != nil {
			out.Replies[i].reject(err)
			continue
		}
		if err := ctx.Err(); err != nil {
			out.Replies[i].fail(notApplied(api.CodeTimeout, err))
			continue
		}
		if !s.IsLeader() {
			out.Replies[i].fail(notApplied(api.CodeNotLeader, errors.New("not the leader")))
			continue
		}
		cctx := ctx
		if i < len(traces) && s.cfg.Tracer != nil {
			var span trace.Span
			cctx, span = s.cfg.Tracer.StartChild(traces[i].With(ctx), "raft.apply", trace.SpanKindInternal)
			if spans == nil {
				spans = make([]trace.Span, len(cmds))
			}
			spans[i] = span
		}
		futures[i] = s.propose(cctx, cmd)
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		res, err := s.applyOutcome(f)
		if spans != nil && spans[i] != nil {
			endApplySpan(spans[i], res, err)
		}
		if err != nil {
			out.Replies[i].fail(err)
			continue
		}
		out.Replies[i] = replyOf(res)
	}
	return out
}

// fail records a failure of one command of a batch in its wire form.
func (r *applyReply) fail(err error) {
	w := api.ToWire(err).(*api.WireError)
	r.ErrCode, r.ErrOutcome, r.ErrMsg = w.Code, w.Outcome, w.Msg
}

// failure is the failure fail recorded, nil when the command did not fail.
func (r *applyReply) failure() *api.WireError {
	if r.ErrCode == "" {
		return nil
	}
	return &api.WireError{Code: r.ErrCode, Outcome: r.ErrOutcome, Msg: r.ErrMsg}
}
