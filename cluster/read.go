package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/registry"
)

// The read path of a server: a read's consistency rule (api.Consistency),
// the read index a linearizable read waits for, and the one wait for this
// server's FSM to reach an index, which writes share.

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
	if err := s.waitApplied(ctx, idx); err != nil {
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
	if !s.lead.ready.Load() {
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
	return s.fsmIndexAtOrBelow(idx), nil
}

// fsmIndexAtOrBelow is the read index of commit index idx: the last entry
// at or below idx that the FSM sees, which every committed write up to idx
// precedes. A follower's wait for it ends with the apply of that entry;
// for a no-op or a barrier (the commit index of a new term) it would find
// out only by asking raft again. idx itself when this server's FSM is
// past it (the usual case without writes; a later entry it applied is
// committed, and ends a follower's wait as well), or when idx is one the
// FSM sees (the usual case under writes: one lookup, in the log cache).
func (s *Server) fsmIndexAtOrBelow(idx uint64) uint64 {
	applied := s.fsm.State().Index()
	if applied >= idx {
		return idx
	}
	// Entries past this leader's applied index are in its log: none is
	// compacted before it is applied.
	return s.lastFSMEntry(applied, idx)
}

// waitApplied returns once this server's FSM reflects every entry up to
// index (a read's read index), on the journal's waiters, woken by the
// apply that reaches index, as a write's wait for its own entry is
// (waitFSMEntry). Raft never hands its no-op and barrier entries to the FSM, whose
// index then stops short of one of them: once raft has applied index, the
// wait is for the last entry at or below it that the FSM does see. A
// read index of this release never names such an entry (readIndexLocal):
// only while a server of an older release may lead does a wait look again
// every waitBackstop (a timer and a re-registration per read and
// backstop, which thousands of reads waiting on a lagging follower would
// make quadratic in the journal's waiter list).
func (s *Server) waitApplied(ctx context.Context, index uint64) error {
	target := index
	for {
		applied := s.fsm.State().Index()
		if applied >= target {
			return nil
		}
		if s.raft.AppliedIndex() >= index {
			if target = s.lastFSMEntry(applied, index); target <= applied {
				return nil
			}
		}
		if s.serverBelow(rpcVersionFSMReadIndex) == "" {
			// A leader of this release: index is an entry the FSM sees.
			return s.waitFSMEntry(ctx, target)
		}
		if err := s.waitJournal(ctx, target); err != nil {
			return fmt.Errorf("waiting to apply index %d (at %d): %w", index, applied, err)
		}
	}
}

// waitBackstop bounds one wait of waitApplied on the journal, for the
// entries the FSM never sees.
const waitBackstop = 50 * time.Millisecond

// waitJournal waits for the FSM to reach index, at most waitBackstop:
// nil when it did or the backstop passed, an *api.Error when ctx ended or
// the server shut down (the outcome of a write waiting here is unknown).
func (s *Server) waitJournal(ctx context.Context, index uint64) error {
	wctx, cancel := context.WithTimeout(ctx, waitBackstop)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	_, err := s.journal.WaitForIndex(wctx, index)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, registry.ErrShutdown), s.ctx.Err() != nil:
		return unknown(api.CodeShutdown, ErrShutdown)
	case ctx.Err() != nil:
		return unknown(api.CodeTimeout, ctx.Err())
	}
	return nil // the backstop
}

// waitFSMEntry returns once this server's FSM has applied index, an
// entry the FSM sees (a write's own): woken by that apply, with none of
// waitApplied's backstop, which only an index of raft's own entries needs.
// A write waits here on every call: no timer or context of its own.
func (s *Server) waitFSMEntry(ctx context.Context, index uint64) error {
	_, err := s.journal.WaitForIndex(ctx, index)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, registry.ErrShutdown):
		return unknown(api.CodeShutdown, ErrShutdown)
	}
	return unknown(api.CodeTimeout, fmt.Errorf("waiting to apply index %d: %w", index, err))
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
