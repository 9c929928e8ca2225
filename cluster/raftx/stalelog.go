package raftx

import (
	"context"
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
// (package cluster) gets there with small segments and trailing logs.
//
// Nothing outside raft can set its last log index: raft.NewRaft reads it
// from the store. So the server watches for the state (the store emptied
// while raft's last log index is past its last snapshot) and asks to be
// restarted (cluster's Server.NeedsRestart); a restart reads the store and
// the snapshot and comes back consistent. The agent re-executes itself.

// logEmptiedNotifier is a log store that says when a deletion left it
// empty (WALStore).
type logEmptiedNotifier interface {
	Emptied() <-chan struct{}
}

// WatchStaleLastLog checks raft (its stats) against its log store each
// time the store is emptied, and returns why raft cannot go on without a
// restart once it finds the state of issue 697, or nil when ctx is done.
// For a store that never says it was emptied it returns nil at once:
// boltdb keeps the log past a snapshot, so no issue 697.
func WatchStaleLastLog(ctx context.Context, store raft.LogStore, stats func() map[string]string) error {
	n, ok := store.(logEmptiedNotifier)
	if !ok {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.Emptied():
		}
		if err := staleLastLog(store, stats()); err != nil {
			return err
		}
	}
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
