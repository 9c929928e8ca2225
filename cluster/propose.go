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
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tracing"
	"github.com/plugreg/plugreg/transport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A write's way to the log, as Consul's raftApply: every write of a
// server, the API's and the server's own (expiries, state checks,
// restores and their padding), is an fsm.Request handed to commit, which
// encodes it once (fsm.EncodeCommandIn: a bad request never reaches the
// log), proposes it (raft on the leader, forwarded from a follower), and
// answers once this server's own FSM has applied its index, so that a
// read or watch here afterwards sees it.

// route says where a write may be proposed.
type route uint8

const (
	// anyServer: through raft on the leader, forwarded from a follower.
	anyServer route = iota
	// leaderOnly: through this server's raft, never forwarded. The
	// leader's own duties: a deposed leader's expiry must not reach the
	// new leader, whose grace it would cut short, and a state check
	// carries the digest of the leader that proposes it.
	leaderOnly
)

// commit encodes req, proposes it by r, and waits until this server has
// applied its index. It returns the FSM's whole result (with the writes a
// host sync's conditions refused); it is nil when nothing is known of the
// entry, and with an error whenever the write failed (res.Err, the FSM's
// refusal, included).
func (s *Server) commit(ctx context.Context, req fsm.Request, r route) (*fsm.ApplyResult, error) {
	if s.hub.IsShutdown() {
		return nil, ErrShutdown
	}
	enc := fsm.Msgpack
	if s.serverBelow(rpcVersionProtoCommands) == "" {
		enc = fsm.Protobuf
	}
	cmd, err := fsm.EncodeCommandIn(req, enc)
	if err != nil {
		return nil, err
	}
	var res *fsm.ApplyResult
	if r == leaderOnly {
		res, err = s.applyLocal(ctx, cmd)
	} else {
		res, err = s.proposeCmd(ctx, cmd)
	}
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return res, res.Err
	}
	wctx, span := s.cfg.Tracer.StartChild(ctx, "plugreg.wait_applied", trace.SpanKindInternal)
	err = s.waitFSMEntry(wctx, res.Index)
	tracing.End(span, err)
	if err != nil {
		return res, err
	}
	return res, nil
}

// proposeCmd proposes an encoded command to the cluster: through raft on
// the leader, forwarded over RPC from a follower. It returns once the
// entry is applied on the server that proposed it. A failure is an
// *api.Error whose Outcome says whether the write may have applied.
func (s *Server) proposeCmd(ctx context.Context, cmd []byte) (*fsm.ApplyResult, error) {
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

// Forwarded writes travel in batches. One RPC a write pays for a header,
// the arguments, a status and a reply, each encoded, written, flushed and
// read on its own, on both sides. Under load many writes wait to be
// forwarded at once; the forwarder sends whatever is waiting as one
// ApplyBatch RPC, and the
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
	case s.fwd.queue <- it:
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
			case first = <-s.fwd.queue:
			case <-s.ctx.Done():
				s.failQueued()
				return
			}
		}
		batch := []*fwdItem{first}
	drain:
		for len(batch) < maxForwardBatch {
			select {
			case it := <-s.fwd.queue:
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
		case it := <-s.fwd.queue:
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
	s.fwd.batches.Add(1)
	s.fwd.batched.Add(int64(len(live)))
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
	return ForwardStats{Batches: s.fwd.batches.Load(), BatchedWrites: s.fwd.batched.Load()}
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
	if b := s.fwd.support.Load(); b != nil && b.addr == addr && time.Since(b.checked) < time.Second {
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
	s.fwd.support.Store(b)
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

// applyForwarded proposes one command a follower forwarded (the Apply
// RPC), on the leader. It is validated before it is proposed: a bad entry
// must never reach the log, even from a misbehaving peer, and what is
// proposed is this server's encoding of it, not the peer's bytes.
func (s *Server) applyForwarded(ctx context.Context, raw []byte) (*applyReply, error) {
	cmd, err := fsm.ReencodeCommand(raw)
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
		cmd, err := fsm.ReencodeCommand(raw) // see applyForwarded
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
