package cluster

import (
	"fmt"
	"strconv"

	"github.com/hashicorp/raft"
)

// hashicorp/raft issue 697 (open; PR 704 open; v1.7.3 and v1.8.0): on a
// MonotonicLogStore (raft-wal, the default store), installSnapshot empties
// the whole log (removeOldLogs) but never resets raft's last log index. A
// server whose log ran past the snapshot's index (a deposed leader's
// uncommitted suffix) goes on claiming entries its store no longer has: it
// refuses every AppendEntries ("failed to get previous log"), so the
// leader sends the snapshot again, for good; or, when a leader's previous
// entry matches the stale index, it commits past its store and panics
// ("log not found"). TestDeposedLeaderWithSuffixPastTheSnapshotCatchesUp
// gets there with small segments and trailing logs.
//
// Nothing outside raft can set its last log index: raft.NewRaft reads it
// from the store. So the server watches for the state (the store emptied
// while raft's last log index is past its last snapshot) and asks to be
// restarted (NeedsRestart); a restart reads the store and the snapshot
// and comes back consistent. The agent re-executes itself.

// logEmptiedNotifier is a log store that says when a deletion left it
// empty (raftx.WALStore).
type logEmptiedNotifier interface {
	Emptied() <-chan struct{}
}

// NeedsRestart receives, once, why this server cannot go on without a
// restart of its process (raft issue 697). Nothing is lost: the log and
// the snapshot on disk are consistent; only raft's memory is not.
func (s *Server) NeedsRestart() <-chan error { return s.needsRestart }

// watchStaleLastLog checks raft against its log store each time the store
// is emptied, until the server shuts down.
func (s *Server) watchStaleLastLog(store raft.LogStore) {
	n, ok := store.(logEmptiedNotifier)
	if !ok {
		return // boltdb keeps the log past a snapshot: no issue 697
	}
	s.goFunc(func() {
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-n.Emptied():
			}
			if err := staleLastLog(store, s.raft.Stats()); err != nil {
				s.logger.Error("raft cannot go on until restarted; restarting", "error", err)
				s.needsRestart <- err // buffered: the one send
				return
			}
		}
	})
}

// staleLastLog says whether raft's stats claim log entries past its last
// snapshot while the store holds none.
func staleLastLog(store raft.LogStore, stats map[string]string) error {
	last, err := store.LastIndex()
	if err != nil || last != 0 {
		return nil
	}
	claimed, _ := strconv.ParseUint(stats["last_log_index"], 10, 64)
	snap, _ := strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	if claimed <= snap {
		return nil
	}
	return fmt.Errorf("raft's last log index is %d but its log store is empty after installing the snapshot at %d (hashicorp/raft issue 697): it would refuse every entry from the leader", claimed, snap)
}
