package raftx

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// StoredLog is what CheckLog found in the stores.
type StoredLog struct {
	Conf raft.Configuration // the newest: the log's last configuration entry, or the newest snapshot's
	Last uint64             // the log's end: its last entry, or the newest snapshot's
}

// CheckLog reads every entry raft.NewRaft will read at start (those after
// the newest snapshot) and fails on the first that cannot be read, and on
// a gap between the newest snapshot and the log. NewRaft panics on such an
// entry ("failed to get log", raft v1.7.3 api.go; related: hashicorp/raft
// issue 85, open, the same panic after a restore from an older snapshot),
// and passes over a gap without a word: the FSM would go on from the
// snapshot as if the entries in it had never been committed. Finding
// either first lets the caller stop with an error that says what to do
// instead of a crash with a stack. On the way it notes the newest
// configuration and the log's end.
func CheckLog(logs raft.LogStore, snaps raft.SnapshotStore) (StoredLog, error) {
	var stored StoredLog
	first, err := logs.FirstIndex()
	if err != nil {
		return stored, fmt.Errorf("first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return stored, fmt.Errorf("last index: %w", err)
	}
	var snapshot uint64
	if metas, err := snaps.List(); err == nil && len(metas) > 0 {
		snapshot, stored.Conf = metas[0].Index, metas[0].Configuration
	}
	stored.Last = max(last, snapshot)
	if last != 0 && first > snapshot+1 {
		return stored, fmt.Errorf("the log starts at entry %d but the newest snapshot ends at %d: entries %d-%d are missing", first, snapshot, snapshot+1, first-1)
	}
	first = max(first, snapshot+1)
	var entry raft.Log
	for i := first; i != 0 && i <= last; i++ {
		if err := logs.GetLog(i, &entry); err != nil {
			return stored, fmt.Errorf("entry %d of %d-%d: %w", i, first, last, err)
		}
		if entry.Type == raft.LogConfiguration {
			stored.Conf = raft.DecodeConfiguration(entry.Data)
		}
	}
	return stored, nil
}

// NewRaftNoPanic is start (raft.NewRaft) with a panic in it returned as an
// error: NewRaft panics on a log entry it cannot read, among others (see
// CheckLog), on the caller's goroutine, before it starts any of its own.
func NewRaftNoPanic(start func() (*raft.Raft, error)) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			perr, ok := p.(error)
			if !ok {
				perr = fmt.Errorf("%v", p)
			}
			r, err = nil, perr
		}
	}()
	return start()
}
