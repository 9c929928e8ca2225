package raftx

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"github.com/plugreg/plugreg/internal/datadir"
)

// privateFiles is raft-wal's file system with each new segment file its
// owner's alone (datadir.FileMode): raft-wal creates them 0644.
type privateFiles struct{ types.VFS }

func (p privateFiles) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := p.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	if err := datadir.Private(filepath.Join(dir, name)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// syncWatchedFiles is raft-wal's file system with each writable file's
// failed Sync reported to failed before the error goes back to raft-wal.
type syncWatchedFiles struct {
	types.VFS
	failed func(path string, err error)
}

func (v syncWatchedFiles) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return syncWatchedFile{f, filepath.Join(dir, name), v.failed}, nil
}

func (v syncWatchedFiles) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return syncWatchedFile{f, filepath.Join(dir, name), v.failed}, nil
}

type syncWatchedFile struct {
	types.WritableFile
	path   string
	failed func(path string, err error)
}

func (f syncWatchedFile) Sync() error {
	err := f.WritableFile.Sync()
	if err != nil {
		f.failed(f.path, err)
	}
	return err
}

// SyncFailedError is a failed fsync of the log. It is fatal: after a
// failed writeback Linux marks the pages clean without writing them, so
// reads go on returning entries the disk may never have had, and a later
// fsync succeeds without writing them (the PostgreSQL "fsyncgate").
// Reopening, or retrying the write, would then serve and acknowledge
// entries that a power cut takes away.
type SyncFailedError struct {
	Path string
	Err  error
}

func (e *SyncFailedError) Error() string {
	return fmt.Sprintf("fsync of %s failed: %v: what it covered may never reach the disk, while reads still return it", e.Path, e.Err)
}

func (e *SyncFailedError) Unwrap() error { return e.Err }

// WALStore is raft-wal as the log and stable store, reopened from disk
// after any failed write but a failed fsync (SyncFailedError), which
// fails every later write of the log and is reported on Failed. raft-wal
// v0.4.2 (the newest; not reported upstream as far as searched,
// docs/dependencies.md) cannot
// recover in process from a write that failed for want of room: a segment
// rotation that fails leaves its tail sealed and every later append
// answers "segment is sealed", and a segment file whose preallocation
// failed is left behind while its state names that segment next, so every
// later rotation or truncation answers "file exists"
// (TestWALTakesEntriesAfterItsDiskFilled). A follower in that state never
// appended again (fault suite, disk family, seed 101) until
// its process restarted, and with another server down the cluster had no
// quorum. Opening the WAL again is what a restart does: it reads what was
// synced, deletes unused segment files and starts a new tail. Entries raft
// was told were stored were synced, so nothing acknowledged is lost; raft
// retries what failed. etcd exits on a failed WAL write for the same
// reason (a store whose write failed is not to be trusted in memory);
// reopening keeps the agent serving.
type WALStore struct {
	dir    string
	size   int // segment size
	logger hclog.Logger

	mu   sync.RWMutex // held for reading by every call, for writing by reopen
	w    *wal.WAL     // nil while a reopen failed: calls try again
	meta *metadb.BoltMetaDB
	gen  uint64 // counts opens, so one failure reopens once

	syncFailed atomic.Pointer[SyncFailedError] // the first failed fsync; set for good
	failed     chan struct{}                   // closed once syncFailed is set
}

var (
	_ raft.LogStore          = (*WALStore)(nil)
	_ raft.StableStore       = (*WALStore)(nil)
	_ raft.MonotonicLogStore = (*WALStore)(nil)
)

var errWALClosed = errors.New("wal is closed")

// OpenWAL opens the WAL in dir, which must exist, with segments of size
// bytes.
func OpenWAL(dir string, size int, logger hclog.Logger) (*WALStore, error) {
	s := &WALStore{dir: dir, size: size, logger: logger, failed: make(chan struct{})}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

// open opens the WAL; s.mu is held for writing (or s is not shared yet).
// The meta store is ours to close: raft-wal v0.4.0's Close left its bolt
// file open (and locked), so the same process could never open the data
// dir again; v0.4.1 closes it too, and BoltMetaDB.Close is idempotent.
func (s *WALStore) open() error {
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(s.dir, wal.WithLogger(s.logger), wal.WithSegmentSize(s.size), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(segment.NewFiler(s.dir, privateFiles{syncWatchedFiles{walfs.New(), s.failSync}})))
	if err != nil {
		meta.Close()
		return err
	}
	s.w, s.meta = w, meta
	s.gen++
	return nil
}

func (s *WALStore) closeLocked() error {
	if s.w == nil {
		return nil
	}
	err := errors.Join(s.w.Close(), s.meta.Close())
	s.w, s.meta = nil, nil
	return err
}

// reopen closes and opens the WAL again, unless another call already did
// since gen.
func (s *WALStore) reopen(gen uint64, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen || s.dir == "" {
		return
	}
	if err := s.closeLocked(); err != nil {
		s.logger.Warn("closing the wal after a failed write", "error", err)
	}
	if err := s.open(); err != nil {
		s.logger.Error("reopening the wal after a failed write failed; the next call tries again", "cause", cause, "error", err)
		s.gen++ // the next call's failure reopens
		return
	}
	s.logger.Warn("reopened the wal after a failed write", "cause", cause)
}

// failSync records the first failed fsync.
func (s *WALStore) failSync(path string, err error) {
	if s.syncFailed.CompareAndSwap(nil, &SyncFailedError{Path: path, Err: err}) {
		close(s.failed)
	}
}

// Failed is closed once an fsync of the log failed; SyncErr says which.
func (s *WALStore) Failed() <-chan struct{} { return s.failed }

// SyncErr is the first failed fsync of the log, or nil.
func (s *WALStore) SyncErr() error {
	if e := s.syncFailed.Load(); e != nil {
		return e
	}
	return nil
}

// do runs fn on the open WAL; a failed write (or no WAL) reopens it, but
// never once an fsync failed.
func (s *WALStore) do(write bool, fn func(*wal.WAL) error) error {
	s.mu.RLock()
	w, gen := s.w, s.gen
	var err error
	if w == nil {
		err = fmt.Errorf("%w: %s", errWALClosed, s.dir)
	} else {
		err = fn(w)
	}
	s.mu.RUnlock()
	if e := s.syncFailed.Load(); e != nil && err != nil {
		return errors.Join(err, e)
	}
	if err != nil && (write || w == nil) {
		s.reopen(gen, err)
	}
	return err
}

func (s *WALStore) FirstIndex() (i uint64, err error) {
	err = s.do(false, func(w *wal.WAL) (err error) { i, err = w.FirstIndex(); return })
	return
}

func (s *WALStore) LastIndex() (i uint64, err error) {
	err = s.do(false, func(w *wal.WAL) (err error) { i, err = w.LastIndex(); return })
	return
}

func (s *WALStore) GetLog(index uint64, l *raft.Log) error {
	return s.do(false, func(w *wal.WAL) error { return w.GetLog(index, l) })
}

// logWrite runs a write of the log, refused once an fsync of it failed.
// raft's term and vote (Set, SetUint64) go on: they live in the meta
// store, with syncs of its own, and raft panics when it cannot save
// them, which would stop the server with a stack before the clean exit
// the failed fsync asks for.
func (s *WALStore) logWrite(fn func(*wal.WAL) error) error {
	if e := s.syncFailed.Load(); e != nil {
		return e
	}
	return s.do(true, fn)
}

func (s *WALStore) StoreLog(l *raft.Log) error {
	return s.logWrite(func(w *wal.WAL) error { return w.StoreLog(l) })
}

func (s *WALStore) StoreLogs(ls []*raft.Log) error {
	return s.logWrite(func(w *wal.WAL) error { return w.StoreLogs(ls) })
}

func (s *WALStore) DeleteRange(min, max uint64) error {
	return s.logWrite(func(w *wal.WAL) error { return w.DeleteRange(min, max) })
}

func (s *WALStore) Set(k, v []byte) error {
	return s.do(true, func(w *wal.WAL) error { return w.Set(k, v) })
}

func (s *WALStore) Get(k []byte) (v []byte, err error) {
	err = s.do(false, func(w *wal.WAL) (err error) { v, err = w.Get(k); return })
	return
}

func (s *WALStore) SetUint64(k []byte, v uint64) error {
	return s.do(true, func(w *wal.WAL) error { return w.SetUint64(k, v) })
}

func (s *WALStore) GetUint64(k []byte) (v uint64, err error) {
	err = s.do(false, func(w *wal.WAL) (err error) { v, err = w.GetUint64(k); return })
	return
}

// IsMonotonic: raft then removes the whole log after installing a
// snapshot instead of keeping entries a WAL cannot hold with a gap.
func (s *WALStore) IsMonotonic() bool { return true }

// Close closes the WAL for good.
func (s *WALStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dir = "" // no reopen after Close
	return s.closeLocked()
}
