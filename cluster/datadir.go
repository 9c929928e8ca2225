package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
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
