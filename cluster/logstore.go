package cluster

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Log store kinds for Config.LogStore.
const (
	LogStoreBolt = "boltdb" // raft-boltdb/v2: raft.db in the data dir (default)
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
	}
	return nil, nil, nil, fmt.Errorf("unknown log store %q", cfg.LogStore)
}
