package cluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/plugreg/plugreg/cluster/raftx"
	"github.com/plugreg/plugreg/internal/datadir"
)

// Log store kinds for Config.LogStore.
const (
	LogStoreBolt = "boltdb" // raft-boltdb/v2: raft.db in the data dir
	// LogStoreWAL is hashicorp/raft-wal: append-only segment files under
	// wal/ in the data dir, the default for a new data dir. It writes each
	// batch of entries with one append and one fsync instead of a bbolt
	// transaction (copy-on-write B+tree pages, a freelist, two fsyncs),
	// which is where the write path's profile spent its disk time with
	// boltdb (docs/results/2026-11-23-bench.md: 1.2-1.6x the write throughput, same run).
	LogStoreWAL = "wal"
)

// walSegmentSize is raft-wal's segment size unless Config.WALSegmentSize
// says otherwise; the bounds keep a segment above a few entries and within
// raft-wal's 32-bit offsets.
const (
	walSegmentSize    = 16 << 20
	minWALSegmentSize = 16 << 10
	maxWALSegmentSize = 1 << 30
)

// storeInDir names the log store a data dir already holds ("" for none).
func storeInDir(dataDir string) string {
	if _, err := os.Stat(filepath.Join(dataDir, "raft.db")); err == nil {
		return LogStoreBolt
	}
	if _, err := os.Stat(filepath.Join(dataDir, "wal")); err == nil {
		return LogStoreWAL
	}
	return ""
}

// openStores opens the Raft log and stable store under the data dir: the
// one it already holds, or for a new dir cfg.LogStore (empty: wal). A data
// dir keeps the store it was created with: opening the other kind would
// silently start from an empty log while the real one sits beside it, so
// asking for it is an error. The closer closes both.
func openStores(cfg *Config) (raft.LogStore, raft.StableStore, io.Closer, error) {
	logs, stable, closer, err := openStore(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	// Every entry and stable value is checked when read back
	// (raftx.ChecksumStore, ChecksumStableStore).
	stable = raftx.ChecksumStableStore{StableStore: stable}
	checked, err := raftx.WithChecksums(logs, stable)
	if err != nil {
		closer.Close()
		return nil, nil, nil, &StoreError{Path: storePath(cfg), NodeID: cfg.NodeID, Err: err}
	}
	return checked, stable, closer, nil
}

// openStore opens the log and stable store as they are on disk.
func openStore(cfg *Config) (raft.LogStore, raft.StableStore, io.Closer, error) {
	kind, have := cfg.LogStore, storeInDir(cfg.DataDir)
	switch {
	case kind == "" && have != "":
		kind = have
	case kind == "":
		kind = LogStoreWAL
	case have != "" && kind != have:
		return nil, nil, nil, fmt.Errorf("log store %s: %s already holds a %s log; keep -log-store %s (or empty)", kind, cfg.DataDir, have, have)
	}
	switch kind {
	case LogStoreBolt:
		b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, "raft.db")})
		if err != nil {
			return nil, nil, nil, &StoreError{Path: filepath.Join(cfg.DataDir, "raft.db"), NodeID: cfg.NodeID, Err: err}
		}
		return b, b, b, nil
	case LogStoreWAL:
		dir := filepath.Join(cfg.DataDir, "wal")
		if err := datadir.MkdirAll(dir, datadir.DirMode); err != nil {
			return nil, nil, nil, fmt.Errorf("create wal dir: %w", err)
		}
		// Segments are preallocated: raft-wal's 64 MiB default would
		// take 64 MiB of every data dir from the start (of a tmpfs in
		// the fault suite). 16 MiB holds ~50,000 registrations, more
		// than the trailing logs kept after a snapshot.
		// raft-wal must be v0.4.1 or newer: v0.4.0 sealed a segment whose
		// tail was truncated without its index block, and the next open
		// failed (raft-wal issue 31; TestLogStoreReopensAfterTailTruncation).
		size := walSegmentSize
		if cfg.WALSegmentSize != 0 {
			size = cfg.WALSegmentSize
		}
		w, err := raftx.OpenWAL(dir, size, cfg.Logger.Named("wal"))
		if err != nil {
			return nil, nil, nil, &StoreError{Path: dir, NodeID: cfg.NodeID, Err: err}
		}
		return w, w, w, nil
	}
	return nil, nil, nil, fmt.Errorf("unknown log store %q", kind)
}
