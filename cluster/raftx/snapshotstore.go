package raftx

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/internal/atomicfile"
	"github.com/plugreg/plugreg/internal/datadir"
)

// SnapshotStore is raft's FileSnapshotStore with what it lacks for a
// power cut and a full disk:
//
//   - the fsync of a new snapshot's own directory. raft v1.7.3 syncs
//     meta.json, state.bin and, after the rename, snapshots/, but never
//     snapshots/ID.tmp itself (hashicorp/raft issue 229, closed, synced
//     the files and not that dir; the dir's sync is not reported upstream
//     as far as searched), so after a power cut the renamed snapshot dir
//     may come back without its files; once the log was compacted past it
//     the server cannot start ("log not found": jepsen's powerloss family
//     with -powerloss-names posix, seed 12, n1 after its first cut). Both
//     files exist once Create returns (raft writes meta.json again on
//     Close, in place), so one sync of the dir in Create makes their
//     names durable.
//   - the removal of a snapshot dir whose meta.json it could not write (a
//     full disk): raft leaves it and tries again at once, so a leader
//     sending a snapshot to a follower whose disk is full left one a try.
//   - the removal at open of the snapshots/*.tmp dirs a snapshot left when
//     the agent died while writing it, or when an install from the leader
//     failed: raft ignores them but never removes them, so each can hold a
//     whole registry's worth of disk for good.
//
// A new snapshot's dir and files are also made the agent's alone
// (internal/datadir): raft makes them 0755 and 0644.
type SnapshotStore struct {
	*raft.FileSnapshotStore
	dir string // the snapshots dir
}

// OpenSnapshotStore opens raft's snapshot store in dataDir, keeping
// retain snapshots, after removing the unfinished snapshots there. Call it
// once the data dir is locked (the log store is open), so that no other
// agent is writing a snapshot there.
func OpenSnapshotStore(dataDir string, retain int, logger hclog.Logger) (SnapshotStore, error) {
	dir := filepath.Join(dataDir, "snapshots")
	tmps, err := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if err != nil {
		return SnapshotStore{}, err
	}
	for _, tmp := range tmps {
		if err := os.RemoveAll(tmp); err != nil {
			return SnapshotStore{}, fmt.Errorf("remove an unfinished snapshot: %w", err)
		}
		logger.Warn("removed an unfinished snapshot", "path", tmp)
	}
	fss, err := raft.NewFileSnapshotStoreWithLogger(dataDir, retain, logger)
	if err != nil {
		return SnapshotStore{}, fmt.Errorf("open snapshot store: %w", err)
	}
	return SnapshotStore{FileSnapshotStore: fss, dir: dir}, nil
}

// Create is raft's, with the dir of the new snapshot synced and made
// private, and the dir of a failed create removed.
func (s SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
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
	// The dir and its files keep the modes set here through the rename
	// and meta.json's rewrite.
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
