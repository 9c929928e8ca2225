// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"sync"
	"time"

	"github.com/hashicorp/go-metrics/compat"
)

// leaderLogWriter writes a leader's new entries to its own log store in a
// goroutine of its own, so that the leader hands them to replication at
// once and writes them in parallel with its followers (the Raft thesis,
// §10.2.1: "the leader can write to its disk in parallel with replicating
// to the followers"). Written on the main thread before replication is
// notified (LeaderLogWriteParallel off), every write waits for the
// leader's fsync and then for a follower's.
//
// The leader counts itself toward the commit quorum only for entries this
// writer has made durable (leaderLogWritten); followers count as before. It
// applies (and so acknowledges) an entry only once the entry is committed
// and durable here too: applying an entry its own log does not hold yet
// would let the FSM, a snapshot of it, and the compaction that follows the
// snapshot run past the leader's log (etcd has to make its snapshots wait
// for exactly this), and an entry the leader acknowledged would rest on its
// followers' disks alone. Waiting costs little: the leader's write runs
// beside the followers', so an entry is acknowledged after the slower of
// the two, where before it took their sum.
//
// One writer per term of leadership, created in runLeader and retired
// (drained, then stopped) before the server acts as anything but a leader:
// see Raft.retireLeaderLogWriter.
type leaderLogWriter struct {
	logs       LogStore
	shutdownCh <-chan struct{}

	// kickCh wakes the writer when entries are added to pending.
	kickCh chan struct{}
	// doneCh is notified (coalesced, buffered 1) after every write, whether
	// it succeeded or failed. Only the main thread reads it.
	doneCh chan struct{}
	// stopCh stops the writer goroutine; exitedCh is closed when it has
	// returned.
	stopCh   chan struct{}
	exitedCh chan struct{}

	mu sync.Mutex
	// pending holds the entries handed to the writer and not yet durable,
	// contiguous and in index order. Replication reads them from here
	// (getLog): they may not be in the log store yet, and a LogCache in
	// front of the store is no help (it inserts an entry only after the
	// store has written it, and it may evict). An entry leaves pending only
	// after StoreLogs has returned it written, so a reader that misses it
	// here finds it in the store.
	pending []*Log
	// durableIndex and durableTerm are the last entry known to be in the log
	// store: the last log when this leader took office, then the last entry
	// of each successful write.
	durableIndex, durableTerm uint64
	// err is the first failed write. The writer writes nothing after it:
	// the entries after a failed one would leave a gap in the log.
	err error
}

func newLeaderLogWriter(logs LogStore, lastIndex, lastTerm uint64, shutdownCh <-chan struct{}) *leaderLogWriter {
	return &leaderLogWriter{
		logs:         logs,
		shutdownCh:   shutdownCh,
		kickCh:       make(chan struct{}, 1),
		doneCh:       make(chan struct{}, 1),
		stopCh:       make(chan struct{}),
		exitedCh:     make(chan struct{}),
		durableIndex: lastIndex,
		durableTerm:  lastTerm,
	}
}

// run is the writer goroutine. It writes pending entries in index order,
// all that are pending in one StoreLogs call (the applies that queue up
// during a write share the next one's fsync), one call at a time: the log
// is written in order by a single writer.
func (w *leaderLogWriter) run() {
	defer close(w.exitedCh)
	for {
		select {
		case <-w.kickCh:
		case <-w.stopCh:
			return
		}
		w.writePending()
	}
}

func (w *leaderLogWriter) writePending() {
	for {
		w.mu.Lock()
		if w.err != nil || len(w.pending) == 0 {
			w.mu.Unlock()
			return
		}
		// The main thread only appends to pending, never changes an entry
		// in it: the batch needs no copy (capped so that an append cannot
		// write into it).
		n := len(w.pending)
		batch := w.pending[:n:n]
		w.mu.Unlock()

		var err error
		select {
		case <-w.shutdownCh:
			// Shutting down: start no new write. What is pending was never
			// acknowledged, and the failure keeps lastLog at what was written.
			err = ErrRaftShutdown
		default:
			start := time.Now()
			err = w.logs.StoreLogs(batch)
			metrics.MeasureSince([]string{"raft", "leader", "storeLogs"}, start)
		}

		w.mu.Lock()
		if err != nil {
			w.err = err
		} else {
			last := batch[n-1]
			w.durableIndex, w.durableTerm = last.Index, last.Term
			w.pending = w.pending[n:]
			if len(w.pending) == 0 {
				w.pending = nil // let the written entries go
			}
		}
		w.mu.Unlock()
		asyncNotifyCh(w.doneCh)
	}
}

// append hands entries, already given their index and term, to the writer.
// Main thread only, before lastLog moves past them and before replication
// is notified: a replication goroutine that sees the new lastLog must find
// the entries here or in the store.
func (w *leaderLogWriter) append(logs []*Log) {
	w.mu.Lock()
	w.pending = append(w.pending, logs...)
	w.mu.Unlock()
	asyncNotifyCh(w.kickCh)
}

// getLog reads an entry pending on w, or from the store.
func (w *leaderLogWriter) getLog(index uint64, log *Log) error {
	w.mu.Lock()
	if n := len(w.pending); n > 0 {
		first := w.pending[0].Index
		if index >= first && index < first+uint64(n) {
			*log = *w.pending[index-first]
			w.mu.Unlock()
			return nil
		}
	}
	w.mu.Unlock()
	return w.logs.GetLog(index, log)
}

// status returns the last durable entry and the failed write's error, if
// any.
func (w *leaderLogWriter) status() (index, term uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.durableIndex, w.durableTerm, w.err
}

// setDurable says that the log ends at index and term with nothing
// pending (restoreUserSnapshot, which burns an index, after a drain).
func (w *leaderLogWriter) setDurable(index, term uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.durableIndex, w.durableTerm = index, term
}

// drain waits until every entry handed to the writer is written, or a
// write has failed, and returns the last durable entry and the error. It
// consumes doneCh: a caller that stays leader must then act on the status
// itself (Raft.leaderLogWritten). Main thread only.
func (w *leaderLogWriter) drain() (index, term uint64, err error) {
	for {
		w.mu.Lock()
		index, term, err = w.durableIndex, w.durableTerm, w.err
		busy := len(w.pending) > 0 && err == nil
		w.mu.Unlock()
		if !busy {
			return index, term, err
		}
		// A write is under way: it notifies doneCh when it ends, success or
		// failure, and the writer never waits for the main thread, so this
		// cannot deadlock. A notification sent between the check above and
		// this receive is buffered, not lost.
		<-w.doneCh
	}
}

// stop ends the writer goroutine and waits for it. Call after drain.
func (w *leaderLogWriter) stop() {
	close(w.stopCh)
	<-w.exitedCh
}

// getLeaderLog reads an entry for replication: from the leader's in-flight
// writes first (w may be nil: serial writes, or a followerReplication made
// without one), then the log store.
func (r *Raft) getLeaderLog(w *leaderLogWriter, index uint64, log *Log) error {
	if w == nil {
		return r.logs.GetLog(index, log)
	}
	return w.getLog(index, log)
}

// leaderLogWritten acts on the writer's status after a write ended (or a
// drain): on success the leader counts itself toward the commit quorum up
// to its durable index and applies committed entries now durable; on
// failure it fails the futures of the entries not written and steps down,
// as a failed StoreLogs always did. Main thread, leader only.
func (r *Raft) leaderLogWritten() {
	w := r.leaderState.logWriter
	index, _, err := w.status()
	if err == ErrRaftShutdown {
		// The writer started no write after shutdown began. The leader loop
		// returns on shutdownCh and runLeader fails the futures. Stepping down
		// here would race with Shutdown setting the Shutdown state.
		return
	}
	if err != nil {
		r.logger.Error("failed to commit logs", "error", err)
		// The entries past the durable index are not in this log. Some may be
		// committed by the followers alone; their outcome is unknown to the
		// caller, as with ErrLeadershipLost. None is applied or acknowledged
		// here: the leader applies only durable entries.
		for e := r.leaderState.inflight.Front(); e != nil; e = e.Next() {
			if f := e.Value.(*logFuture); f.log.Index > index {
				f.respond(err)
			}
		}
		// setState retires the writer: lastLog goes back to its durable index.
		r.setState(Follower)
		return
	}
	r.leaderState.commitment.match(r.localID, index)
	// Entries the followers committed before this write ended were left
	// unapplied (the commitCh case applies durable entries only); the match
	// above notifies commitCh only when the commit index moves.
	if e := r.leaderState.inflight.Front(); e != nil {
		if idx := e.Value.(*logFuture).log.Index; idx <= index && idx <= r.leaderState.commitment.getCommitIndex() {
			asyncNotifyCh(r.leaderState.commitCh)
		}
	}
}

// retireLeaderLogWriter drains the leader's writer and stops it, before
// this server acts as anything but a leader: as a follower or candidate it
// may delete or overwrite the log's tail (appendEntries), replace the log
// (installSnapshot), and compare, or advertise, its last log in a vote; a
// write still under way would race with the first two and the last log
// would not be on disk for the third. If a write failed, lastLog goes back
// to the last entry written, the entries after it being in no log store.
// (While leader, lastLog runs ahead of the disk: dispatchLogs advances it so
// that the next batch takes the next indexes. A leader grants no vote, and
// it reaches this function before any other role.) Main thread; idempotent.
func (r *Raft) retireLeaderLogWriter() {
	w := r.leaderState.logWriter
	if w == nil {
		return
	}
	index, term, err := w.drain()
	if err != nil {
		r.setLastLog(index, term)
	}
	w.stop()
	r.leaderState.logWriter = nil
}

// writtenCh is doneCh, or nil (never ready) without a writer.
func (w *leaderLogWriter) writtenCh() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.doneCh
}
