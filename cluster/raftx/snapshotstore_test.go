package raftx

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/plugreg/plugreg/tests/framework/lazymount"
)

// A snapshot created on a full disk (a follower sent a snapshot while its
// disk is full: raft tries again at once) leaves no dir behind: raft left
// the dir of each try whose meta.json it could not write, until the next
// start.
func TestSnapshotCreateOnAFullDiskLeavesNothing(t *testing.T) {
	m := lazymount.Sized(t, 1<<20)
	store, err := OpenSnapshotStore(m.Dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ballast, err := os.Create(filepath.Join(m.Dir, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	defer ballast.Close()
	for {
		if _, err := ballast.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	for try := 0; try < 3; try++ {
		sink, err := store.Create(raft.SnapshotVersionMax, 10, 2, raft.Configuration{}, 1, nil)
		if err == nil {
			sink.Cancel()
			t.Fatal("a snapshot created on a full disk")
		}
	}
	if left, _ := filepath.Glob(filepath.Join(m.Dir, "snapshots", "*.tmp")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// A snapshot whose fsync fails is never listed, so never restored nor
// sent, and leaves nothing behind: a failed fsync of a snapshot needs no
// stop (docs/durability.md), unlike one of the log.
func TestFailedSnapshotSyncLeavesNoSnapshot(t *testing.T) {
	m := lazymount.New(t)
	store, err := OpenSnapshotStore(m.Dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	failed := m.FailSync("state.bin")
	if err := sink.Close(); err == nil {
		t.Fatal("a snapshot whose fsync failed closed without an error")
	}
	<-failed
	if metas, err := store.List(); err != nil || len(metas) != 0 {
		t.Fatalf("listed %v (%v), want no snapshot", metas, err)
	}
	if left, _ := filepath.Glob(filepath.Join(m.Dir, "snapshots", "*")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

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

	if _, err := OpenSnapshotStore(dir, 2, logger); err != nil {
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
