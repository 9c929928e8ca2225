package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A snapshot the agent died writing (or a failed install) leaves a .tmp
// dir that raft never removes; the next start does, and keeps the real
// snapshots.
func TestUnfinishedSnapshotsRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	logger := hclog.NewNullLogger()
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, logger)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	done, err := store.Create(1, 10, 1, raft.Configuration{}, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	done.Write([]byte("state"))
	if err := done.Close(); err != nil {
		t.Fatal(err)
	}
	unfinished, err := store.Create(1, 20, 1, raft.Configuration{}, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	unfinished.Write([]byte("half a state"))
	// The agent dies here: no Close, no Cancel.
	tmps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*.tmp"))
	if len(tmps) != 1 {
		t.Fatalf("want one unfinished snapshot dir, have %v", tmps)
	}

	if err := removeSnapshotTemps(dir, logger); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmps[0]); !os.IsNotExist(err) {
		t.Fatalf("%s is still there (%v)", tmps[0], err)
	}
	metas, err := store.List()
	if err != nil || len(metas) != 1 || metas[0].Index != 10 {
		t.Fatalf("snapshots after the cleanup: %v (%v), want the finished one at 10", metas, err)
	}
}
