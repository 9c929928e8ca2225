package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// StoreError says a server cannot start from its data dir because a store
// in it cannot be read: the log store, the stable store or the snapshots.
// Restarting the same binary on the same files fails the same way, so the
// message says what to do instead; the agent prints it as its one line on
// exit (no panic, no stack), and a supervisor's restart loop is not the
// recovery path (docs/operations.md "A server that cannot open its data
// dir").
type StoreError struct {
	Path   string // the file or dir that cannot be read
	NodeID string
	Err    error
	// Running: the server met it while it ran (a failed fsync of the
	// log) and stopped, rather than at start.
	Running bool
}

func (e *StoreError) Error() string {
	if errors.Is(e.Err, fs.ErrPermission) {
		return fmt.Sprintf("cannot open %s: %v: the agent's user must own the data dir and everything in it", e.Path, e.Err)
	}
	what := "cannot start from"
	if e.Running {
		what = "stopped: the data dir cannot be trusted:"
	}
	return fmt.Sprintf("%s %s: %v. Restarting will not help. "+
		"If the other servers have a leader: move the data dir aside (keep it for a bug report), "+
		"run 'plugreg operator raft remove-peer %s' against them once 'plugreg members' shows this node failed, "+
		"and start this server on an empty data dir: it rejoins and receives a snapshot. "+
		"If no server has a leader, see docs/operations.md, outage recovery",
		what, e.Path, e.Err, e.NodeID)
}

func (e *StoreError) Unwrap() error { return e.Err }

// storePath names the log store's file or dir in cfg's data dir.
func storePath(cfg *Config) string {
	if storeInDir(cfg.DataDir) == LogStoreBolt {
		return filepath.Join(cfg.DataDir, "raft.db")
	}
	return filepath.Join(cfg.DataDir, "wal")
}

// checkSnapshots refuses a data dir whose snapshots raft would pass over
// without a word: one newer than the newest it can read whose meta.json
// cannot be read (raft would restore an older snapshot, from which the
// log does not reach the newest state), and a newest one whose state.bin
// fails its CRC (raft falls back to the one before). An older snapshot
// that cannot be read is left alone: raft would not use it anyway. The
// newest is read whole once more for its CRC: what raft reads next, from
// the page cache. Through a store of its own that logs nothing (the
// refusal is the one line that says what happened) and lists every
// snapshot, not only the two raft keeps: a crash between a new snapshot
// and the removal of the oldest leaves three.
func checkSnapshots(cfg *Config) error {
	dir := filepath.Join(cfg.DataDir, "snapshots")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &StoreError{Path: dir, NodeID: cfg.NodeID, Err: err}
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, math.MaxInt32, hclog.NewNullLogger())
	if err != nil {
		return &StoreError{Path: dir, NodeID: cfg.NodeID, Err: err}
	}
	metas, err := snaps.List()
	if err != nil {
		return &StoreError{Path: dir, NodeID: cfg.NodeID, Err: err}
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
		if len(metas) == 0 || newerSnapshot(term, index, name, metas[0]) {
			return &StoreError{Path: filepath.Join(dir, name), NodeID: cfg.NodeID, Err: errors.New("snapshot's meta.json cannot be read")}
		}
	}
	if len(metas) == 0 {
		return nil
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		return &StoreError{Path: filepath.Join(dir, metas[0].ID), NodeID: cfg.NodeID, Err: fmt.Errorf("snapshot at index %d: %w", metas[0].Index, err)}
	}
	return rc.Close()
}

// newerSnapshot orders snapshots as raft's file store does: by term, then
// index, then ID.
func newerSnapshot(term, index uint64, id string, than *raft.SnapshotMeta) bool {
	if term != than.Term {
		return term > than.Term
	}
	if index != than.Index {
		return index > than.Index
	}
	return id > than.ID
}

// syncFailer is a log store that reports a failed fsync (raftx.WALStore).
type syncFailer interface {
	Failed() <-chan struct{}
	SyncErr() error
}

// watchSyncs hands a failed fsync of the log to Fatal: the store refuses
// every later write, and the process must stop (raftx.SyncFailedError).
func (s *Server) watchSyncs(f syncFailer) {
	select {
	case <-s.ctx.Done():
	case <-f.Failed():
		s.fatal <- &StoreError{Path: storePath(s.cfg), NodeID: s.cfg.NodeID, Err: f.SyncErr(), Running: true}
	}
}

// Fatal receives the failure that stops this server while it runs, if
// one happens: a failed fsync of its log. The agent then shuts the
// server down and exits with it (status 65, as a store it cannot open).
func (s *Server) Fatal() <-chan error { return s.fatal }
