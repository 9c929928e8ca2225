package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/plugreg/plugreg/cluster/raftx"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DataDirState is what a stopped server's data dir holds of Raft: what an
// operator compares across the survivors of a lost quorum to pick the one
// to recover from (docs/operations.md, Outage recovery).
type DataDirState struct {
	DataDir  string
	NodeID   string // the node-id file ("" when there is none)
	LogStore string // LogStoreWAL or LogStoreBolt
	// CurrentTerm is the latest term this server knew of (its stable
	// store), at least LastTerm.
	CurrentTerm uint64
	// FirstLogIndex and LastLogIndex bound the entries in the log (both 0
	// when it is empty, as right after a recovery); LastLogTerm is the
	// last entry's term.
	FirstLogIndex, LastLogIndex, LastLogTerm uint64
	// Snapshot is the newest snapshot, nil when there is none.
	Snapshot *SnapshotInfo
	// LastIndex and LastTerm are Raft's: the last log entry's, or the
	// snapshot's when the log holds nothing after it. Of two servers, the
	// more advanced is the one with the higher LastTerm, then the higher
	// LastIndex (Raft's election rule).
	LastIndex, LastTerm uint64
	// Configuration is the latest Raft configuration, committed or not,
	// as Raft would start with it: the last configuration entry of the
	// log, or the snapshot's. ConfigurationIndex is where it was made;
	// ConfigurationFrom says "log" or "snapshot" ("" when none).
	Configuration      []raft.Server
	ConfigurationIndex uint64
	ConfigurationFrom  string
	// PeersJSON: a peers.json waits in the data dir for the next start.
	PeersJSON bool
}

// SnapshotInfo describes one snapshot in the data dir.
type SnapshotInfo struct {
	ID          string
	Index, Term uint64
	Size        int64
}

// InspectDataDir reads the Raft state of a stopped server's data dir. It
// refuses (ErrDataDirInUse) a data dir whose log store a running agent
// holds: both stores lock a bolt file, and it checks that lock without
// waiting before it opens anything. It opens the log as the agent's start
// would (raft-wal finds the end of its last segment), reads snapshots'
// metadata files directly (raft's snapshot store would write a test file),
// and writes nothing of its own.
func InspectDataDir(dir string) (*DataDirState, error) {
	st := &DataDirState{DataDir: dir, LogStore: storeInDir(dir)}
	var lockFile string
	switch st.LogStore {
	case LogStoreBolt:
		lockFile = filepath.Join(dir, "raft.db")
	case LogStoreWAL:
		lockFile = filepath.Join(dir, "wal", metadb.FileName)
	default:
		return nil, fmt.Errorf("inspect %s: no Raft log store (neither raft.db nor wal/): not a server's data dir", dir)
	}
	if err := checkUnlocked(lockFile); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "node-id")); err == nil {
		st.NodeID = strings.TrimSpace(string(b))
	}
	if _, err := os.Stat(filepath.Join(dir, PeersFileName)); err == nil {
		st.PeersJSON = true
	}

	raw, rawStable, closer, err := openStoresForInspect(dir, st.LogStore)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", dir, err)
	}
	defer closer.Close()
	stable := raftx.ChecksumStableStore{StableStore: rawStable}
	// Each entry read is checked, as the agent checks it at start.
	logs, err := raftx.ReadChecksums(raw, stable)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", dir, err)
	}
	if st.CurrentTerm, err = raftx.StableUint64(stable, []byte("CurrentTerm")); err != nil { // raft's key (keyCurrentTerm)
		return nil, fmt.Errorf("inspect %s: current term: %w", dir, err)
	}
	if st.FirstLogIndex, err = logs.FirstIndex(); err != nil {
		return nil, fmt.Errorf("inspect %s: first log index: %w", dir, err)
	}
	if st.LastLogIndex, err = logs.LastIndex(); err != nil {
		return nil, fmt.Errorf("inspect %s: last log index: %w", dir, err)
	}
	if st.Snapshot, st.Configuration, st.ConfigurationIndex, err = newestSnapshot(filepath.Join(dir, "snapshots")); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", dir, err)
	}
	if st.Snapshot != nil {
		st.LastIndex, st.LastTerm = st.Snapshot.Index, st.Snapshot.Term
		st.ConfigurationFrom = "snapshot"
	}
	// The log's configuration entries: the last one wins over the
	// snapshot's (Raft's own rule at start). Reading every entry is
	// cheap at the log's size (snapshot threshold plus trailing logs).
	if st.LastLogIndex > 0 {
		for i := st.FirstLogIndex; i <= st.LastLogIndex; i++ {
			var l raft.Log
			if err := logs.GetLog(i, &l); err != nil {
				return nil, fmt.Errorf("inspect %s: log entry %d: %w", dir, i, err)
			}
			if l.Type == raft.LogConfiguration && l.Index > st.ConfigurationIndex {
				st.Configuration = raft.DecodeConfiguration(l.Data).Servers
				st.ConfigurationIndex, st.ConfigurationFrom = l.Index, "log"
			}
			if i == st.LastLogIndex {
				st.LastLogTerm = l.Term
			}
		}
		if st.LastLogIndex >= st.LastIndex {
			st.LastIndex, st.LastTerm = st.LastLogIndex, st.LastLogTerm
		}
	}
	return st, nil
}

// checkUnlocked fails with ErrDataDirInUse when another process holds the
// bolt file's lock (a running agent: bolt takes it for as long as the
// store is open). It does not wait: bolt's own open would, forever.
func checkUnlocked(boltFile string) error {
	db, err := bbolt.Open(boltFile, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("%w (%s is locked)", ErrDataDirInUse, boltFile)
	case err != nil:
		return fmt.Errorf("open %s: %w", boltFile, err)
	}
	return db.Close()
}

// openStoresForInspect opens the data dir's existing log store; unlike
// openStores it creates nothing, and boltdb is opened read-only.
func openStoresForInspect(dir, kind string) (raft.LogStore, raft.StableStore, io.Closer, error) {
	switch kind {
	case LogStoreBolt:
		b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"),
			BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second}})
		if err != nil {
			if errors.Is(err, berrors.ErrTimeout) { // an agent started since the check
				return nil, nil, nil, fmt.Errorf("%w (raft.db is locked)", ErrDataDirInUse)
			}
			return nil, nil, nil, fmt.Errorf("open raft.db: %w", err)
		}
		return b, b, b, nil
	default:
		w, err := raftx.OpenWAL(filepath.Join(dir, "wal"), walSegmentSize, hclog.NewNullLogger())
		if err != nil {
			return nil, nil, nil, fmt.Errorf("open wal: %w", err)
		}
		return w, w, w, nil
	}
}

// newestSnapshot reads the metadata of the snapshots under dir (raft's
// FileSnapshotStore layout: one directory per snapshot with meta.json, a
// ".tmp" suffix while it is written) and returns the newest complete one,
// as raft orders them (term, then index, then ID), with its configuration.
func newestSnapshot(dir string) (*SnapshotInfo, []raft.Server, uint64, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, 0, nil
	}
	if err != nil {
		return nil, nil, 0, fmt.Errorf("list snapshots: %w", err)
	}
	var metas []raft.SnapshotMeta
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "meta.json"))
		if err != nil {
			continue // raft skips a snapshot without its meta too
		}
		var m raft.SnapshotMeta
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, nil, 0, fmt.Errorf("snapshot %s: meta.json: %w", e.Name(), err)
		}
		metas = append(metas, m)
	}
	if len(metas) == 0 {
		return nil, nil, 0, nil
	}
	sort.Slice(metas, func(i, j int) bool {
		return raftx.NewerSnapshot(metas[i].Term, metas[i].Index, metas[i].ID, &metas[j])
	})
	m := metas[0]
	return &SnapshotInfo{ID: m.ID, Index: m.Index, Term: m.Term, Size: m.Size}, m.Configuration.Servers, m.ConfigurationIndex, nil
}
