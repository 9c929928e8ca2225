package raftx

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/plugreg/plugreg/internal/datadir"
	"github.com/plugreg/plugreg/tests/framework/lazymount"
)

// openWAL opens a WAL in dir (created) for the test, closed at its end.
func openWAL(t *testing.T, dir string, size int) *WALStore {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWAL(dir, size, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// storeEntries appends entries from..to of term to ls, batch at a time
// (raft-wal seals a segment only at the end of an append).
func storeEntries(t *testing.T, ls raft.LogStore, from, to, term uint64, batch uint64) {
	t.Helper()
	for i := from; i <= to; i += batch {
		var b []*raft.Log
		for j := i; j <= min(i+batch-1, to); j++ {
			b = append(b, &raft.Log{Index: j, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("%0150d", j))})
		}
		if err := ls.StoreLogs(b); err != nil {
			t.Fatalf("store entries %d-%d: %v", i, min(i+batch-1, to), err)
		}
	}
}

// A wal whose disk filled up must take entries again once there is room,
// without a restart. raft-wal creates a segment file (O_EXCL) and then
// preallocates it; when the preallocation fails (ENOSPC) it leaves the
// file behind while its state still names that segment next, so every
// later rotation failed with "file exists" until the process restarted:
// in the fault suite's disk family a follower never appended again
// ("failed to reset logs: ... .wal: file exists" after each snapshot
// install; seed 101, 2026-11-25) and, with another server down, the
// cluster had no quorum. Needs root to mount a small tmpfs.
func TestWALTakesEntriesAfterItsDiskFilled(t *testing.T) {
	dir := smallTmpfs(t, 1<<20)
	ls := openWAL(t, filepath.Join(dir, "wal"), 64<<10)
	// Fill the disk: append until an append fails for want of room.
	filler := filepath.Join(dir, "filler")
	fill, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	var next uint64 = 1
	chunk := make([]byte, 32<<10)
	for {
		if _, err := fill.Write(chunk); err != nil {
			break
		}
	}
	// Leave room for the rest of this segment and its index block, not
	// for a whole new segment.
	if st, err := fill.Stat(); err == nil {
		fill.Truncate(st.Size() - 32<<10)
	}
	fill.Close()
	failed := false
	// Small entries fit in the preallocated segment; the append that fills
	// it seals it and creates the next, whose preallocation fails.
	for i := 0; i < 5000 && !failed; i++ {
		err := ls.StoreLogs([]*raft.Log{{Index: next, Term: 1, Type: raft.LogCommand, Data: make([]byte, 100)}})
		if err != nil {
			t.Logf("append %d on a full disk: %v", next, err)
			failed = true
			break
		}
		next++
	}
	if !failed {
		t.Fatal("no append failed on a full disk: the test did not fill it")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Room again: appends, a truncation of everything (what a snapshot
	// install does) and appends after it must all work.
	storeEntries(t, ls, next, next+40, 1, 4)
	last := next + 40
	if err := ls.DeleteRange(1, last); err != nil {
		t.Fatalf("delete everything: %v", err)
	}
	storeEntries(t, ls, last+100, last+140, 2, 4)
	if got, err := ls.LastIndex(); err != nil || got != last+140 {
		t.Fatalf("last index %d (%v), want %d", got, err, last+140)
	}
}

// smallTmpfs mounts a tmpfs of size bytes for the test and unmounts it at
// the end; skips where the test may not mount.
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// A failed fsync of the log is fatal: the write that met it fails with a
// SyncFailedError, Failed is closed, every later write of the log fails
// the same way without the store being reopened (a reopen would read the
// dropped entries back from the page cache and claim them), raft's term
// still saves, and after a power cut the log holds everything stored
// before the failure. On lazyfs, whose FailSync drops the dirty pages as
// Linux does after a failed writeback.
func TestWALFailedSyncIsFatal(t *testing.T) {
	// No GC while this process serves the mount the WAL is on: raft-wal's
	// meta store (bbolt) maps wal-meta.db into memory, and a page fault on
	// it waits for this process's own FUSE server. A stop-the-world then
	// waits for the faulting thread, which waits for the server's
	// goroutines, which the stop-the-world has stopped: the test hung
	// that way under load (go-fuse's README warns against mapping files
	// a process serves itself).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	m := lazymount.New(t)
	dir := filepath.Join(m.Dir, "wal")
	if err := datadir.MkdirAll(dir, datadir.DirMode); err != nil { // as the server makes it
		t.Fatal(err)
	}
	w := openWAL(t, dir, 1<<20)
	storeEntries(t, w, 1, 10, 1, 5)
	failed := m.FailSync(".wal")
	var sf *SyncFailedError
	err := w.StoreLogs([]*raft.Log{{Index: 11, Term: 1, Type: raft.LogCommand, Data: []byte("eleven")}})
	if !errors.As(err, &sf) {
		t.Fatalf("the write whose fsync failed answered %v, want a SyncFailedError", err)
	}
	<-failed
	select {
	case <-w.Failed():
	default:
		t.Fatal("Failed is not closed")
	}
	if last, err := w.LastIndex(); err != nil || last != 10 {
		t.Fatalf("after the failed fsync the log claims %d (%v), want 10", last, err)
	}
	for _, idx := range []uint64{11, 12} {
		if err := w.StoreLogs([]*raft.Log{{Index: idx, Term: 1, Type: raft.LogCommand}}); !errors.As(err, &sf) {
			t.Fatalf("a write of %d after the failed fsync answered %v, want the SyncFailedError", idx, err)
		}
	}
	if err := w.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatalf("the term after a failed fsync of the log: %v", err)
	}
	var l raft.Log
	if err := w.GetLog(10, &l); err != nil {
		t.Fatalf("read entry 10: %v", err)
	}
	w.Close()
	m.Cut(nil)
	again := openWAL(t, dir, 1<<20)
	if last, err := again.LastIndex(); err != nil || last != 10 {
		t.Fatalf("after the power cut the log ends at %d (%v), want 10", last, err)
	}
}
