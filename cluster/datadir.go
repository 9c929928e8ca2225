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
	"github.com/plugreg/plugreg/internal/atomicfile"
	"github.com/plugreg/plugreg/internal/datadir"
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

// storedLog is what checkLogReadable found in the stores.
type storedLog struct {
	conf raft.Configuration // the newest: the log's last configuration entry, or the newest snapshot's
	last uint64             // the log's end: its last entry, or the newest snapshot's
}

// checkLogReadable reads every entry raft.NewRaft will read at start (those
// after the newest snapshot) and returns a StoreError for the first that
// cannot be read. NewRaft panics on such an entry (raft v1.7: "failed to
// get log"); finding it first turns a crash with a stack into an error
// that says what to do. On the way it notes the newest configuration and
// the log's end, which the rollback check asks the other servers about
// (rollback.go).
func checkLogReadable(cfg *Config, logs raft.LogStore, snaps raft.SnapshotStore) (storedLog, error) {
	var stored storedLog
	first, err := logs.FirstIndex()
	if err != nil {
		return stored, &StoreError{Path: storePath(cfg), NodeID: cfg.NodeID, Err: fmt.Errorf("first index: %w", err)}
	}
	last, err := logs.LastIndex()
	if err != nil {
		return stored, &StoreError{Path: storePath(cfg), NodeID: cfg.NodeID, Err: fmt.Errorf("last index: %w", err)}
	}
	var snapshot uint64
	if metas, err := snaps.List(); err == nil && len(metas) > 0 {
		snapshot, stored.conf = metas[0].Index, metas[0].Configuration
	}
	stored.last = max(last, snapshot)
	// Entries between the newest snapshot and the log would be skipped
	// without a word: the FSM would go on from the snapshot as if they
	// had never been committed.
	if last != 0 && first > snapshot+1 {
		return stored, &StoreError{Path: storePath(cfg), NodeID: cfg.NodeID, Err: fmt.Errorf("the log starts at entry %d but the newest snapshot ends at %d: entries %d-%d are missing", first, snapshot, snapshot+1, first-1)}
	}
	first = max(first, snapshot+1)
	var entry raft.Log
	for i := first; i != 0 && i <= last; i++ {
		if err := logs.GetLog(i, &entry); err != nil {
			return stored, &StoreError{Path: storePath(cfg), NodeID: cfg.NodeID, Err: fmt.Errorf("entry %d of %d-%d: %w", i, first, last, err)}
		}
		if entry.Type == raft.LogConfiguration {
			stored.conf = raft.DecodeConfiguration(entry.Data)
		}
	}
	return stored, nil
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

// newRaftNoPanic is raft.NewRaft with a panic in it (it panics on a log
// entry it cannot read, among others) returned as a StoreError. The panic
// happens on the caller's goroutine, before NewRaft starts any of its own.
func newRaftNoPanic(cfg *Config, start func() (*raft.Raft, error)) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			perr, ok := p.(error)
			if !ok {
				perr = fmt.Errorf("%v", p)
			}
			r, err = nil, &StoreError{Path: cfg.DataDir, NodeID: cfg.NodeID, Err: fmt.Errorf("raft start: %w", perr)}
		}
	}()
	r, err = start()
	if err != nil {
		err = &StoreError{Path: cfg.DataDir, NodeID: cfg.NodeID, Err: fmt.Errorf("raft start: %w", err)}
	}
	return r, err
}

// removeSnapshotTemps removes the snapshots/*.tmp dirs a snapshot left
// behind when the agent died while writing it, or when an install from
// the leader failed: raft's FileSnapshotStore ignores them but never
// removes them, so each can hold a whole registry's worth of disk for
// good. Called after the log store is open (it locks the data dir), so no
// other agent is writing a snapshot there.
func removeSnapshotTemps(dataDir string, logger interface {
	Warn(msg string, args ...interface{})
}) error {
	tmps, err := filepath.Glob(filepath.Join(dataDir, "snapshots", "*.tmp"))
	if err != nil {
		return err
	}
	for _, tmp := range tmps {
		if err := os.RemoveAll(tmp); err != nil {
			return fmt.Errorf("remove an unfinished snapshot: %w", err)
		}
		logger.Warn("removed an unfinished snapshot", "path", tmp)
	}
	return nil
}

// syncedSnapshotStore is raft's FileSnapshotStore with the one fsync it
// lacks: the directory of a new snapshot. raft v1.7.3 syncs meta.json,
// state.bin and, after the rename, snapshots/, but never snapshots/ID.tmp
// itself, so after a power cut the renamed snapshot dir may come back
// without its files; once the log was compacted past it the server cannot
// start ("log not found": jepsen's powerloss family with -powerloss-names
// posix, seed 12, n1 after its first cut). Both files exist once Create
// returns (raft writes meta.json again on Close, in place), so one sync
// of the dir here makes their names durable.
type syncedSnapshotStore struct {
	*raft.FileSnapshotStore
	dir string // the snapshots dir
}

func (s syncedSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		// raft leaves the dir of a snapshot whose meta.json it could not
		// write (a full disk), and tries again at once: a leader sending
		// a snapshot to a follower whose disk is full left one a try.
		// Its name is TERM-INDEX-MSEC.tmp; only a create of this very
		// snapshot makes one so named.
		if left, gerr := filepath.Glob(filepath.Join(s.dir, fmt.Sprintf("%d-%d-*.tmp", term, index))); gerr == nil {
			for _, d := range left {
				os.RemoveAll(d)
			}
		}
		return nil, err
	}
	tmp := filepath.Join(s.dir, sink.ID()+".tmp")
	// raft makes the dir 0755 and its files 0644; they keep the modes
	// set here through the rename and meta.json's rewrite.
	err = datadir.Private(tmp)
	if err == nil {
		err = datadir.Tighten(tmp)
	}
	if err == nil {
		err = atomicfile.SyncDir(tmp)
	}
	if err != nil {
		sink.Cancel()
		return nil, fmt.Errorf("create snapshot: %w", err)
	}
	return sink, nil
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
