package raftx

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// SnapshotError is a snapshot CheckSnapshots refuses: at Path, for Err.
type SnapshotError struct {
	Path string
	Err  error
}

func (e *SnapshotError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *SnapshotError) Unwrap() error { return e.Err }

// CheckSnapshots refuses, with a SnapshotError, a data dir whose
// snapshots raft would pass over without a word (raft v1.7.3's
// FileSnapshotStore.List skips a snapshot whose meta.json it cannot read,
// and its restore at start falls back to an older snapshot when the
// newest fails; not reported upstream as far as searched): one newer than the newest it can read whose meta.json
// cannot be read (raft would restore an older snapshot, from which the
// log does not reach the newest state), and a newest one whose state.bin
// fails its CRC (raft falls back to the one before). An older snapshot
// that cannot be read is left alone: raft would not use it anyway. The
// newest is read whole once more for its CRC: what raft reads next, from
// the page cache. Through a store of its own that logs nothing (the
// refusal is the one line that says what happened) and lists every
// snapshot, not only the two raft keeps: a crash between a new snapshot
// and the removal of the oldest leaves three.
func CheckSnapshots(dataDir string) error {
	dir := filepath.Join(dataDir, "snapshots")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &SnapshotError{Path: dir, Err: err}
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, math.MaxInt32, hclog.NewNullLogger())
	if err != nil {
		return &SnapshotError{Path: dir, Err: err}
	}
	metas, err := snaps.List()
	if err != nil {
		return &SnapshotError{Path: dir, Err: err}
	}
	listed := map[string]bool{}
	for _, m := range metas {
		listed[m.ID] = true
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasSuffix(name, ".tmp") || listed[name] {
			continue
		}
		var term, index, ms uint64
		if n, _ := fmt.Sscanf(name, "%d-%d-%d", &term, &index, &ms); n != 3 {
			continue // not a name raft gives a snapshot
		}
		if len(metas) == 0 || NewerSnapshot(term, index, name, metas[0]) {
			return &SnapshotError{Path: filepath.Join(dir, name), Err: errors.New("snapshot's meta.json cannot be read")}
		}
	}
	if len(metas) == 0 {
		return nil
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		return &SnapshotError{Path: filepath.Join(dir, metas[0].ID), Err: fmt.Errorf("snapshot at index %d: %w", metas[0].Index, err)}
	}
	return rc.Close()
}

// NewerSnapshot orders snapshots as raft's file store does: by term, then
// index, then ID.
func NewerSnapshot(term, index uint64, id string, than *raft.SnapshotMeta) bool {
	if term != than.Term {
		return term > than.Term
	}
	if index != than.Index {
		return index > than.Index
	}
	return id > than.ID
}
