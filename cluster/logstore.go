package cluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
)

// Log store kinds for Config.LogStore.
const (
	LogStoreBolt = "boltdb" // raft-boltdb/v2: raft.db in the data dir (default)
	// LogStoreWAL is hashicorp/raft-wal: append-only segment files under
	// wal/ in the data dir. It writes each batch of entries with one
	// append and one fsync instead of a bbolt transaction (copy-on-write
	// B+tree pages, freelist), which is what the write path's profile
	// spends its disk time on with boltdb.
	LogStoreWAL = "wal"
)

// openStores opens the Raft log and stable store chosen by cfg.LogStore
// under the data dir. The closer closes both.
func openStores(cfg *Config) (raft.LogStore, raft.StableStore, io.Closer, error) {
	switch cfg.LogStore {
	case "", LogStoreBolt:
		b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, "raft.db")})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("open raft.db: %w", err)
		}
		return b, b, b, nil
	case LogStoreWAL:
		// A data dir keeps the store it was created with: switching would
		// silently start from an empty log while raft.db holds the real
		// one.
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "raft.db")); err == nil {
			return nil, nil, nil, fmt.Errorf("log store wal: %s already holds a boltdb log (raft.db)", cfg.DataDir)
		}
		dir := filepath.Join(cfg.DataDir, "wal")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, nil, nil, fmt.Errorf("create wal dir: %w", err)
		}
		w, err := wal.Open(dir, wal.WithLogger(cfg.Logger.Named("wal")))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("open wal: %w", err)
		}
		return w, w, w, nil
	}
	return nil, nil, nil, fmt.Errorf("unknown log store %q", cfg.LogStore)
}
