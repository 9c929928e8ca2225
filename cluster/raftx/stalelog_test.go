package raftx

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// raftStats is what raft.Stats says of its log and last snapshot.
func raftStats(lastLog, lastSnapshot string) map[string]string {
	return map[string]string{"last_log_index": lastLog, "last_snapshot_index": lastSnapshot}
}

// The state of hashicorp/raft issue 697 is an empty store while raft
// claims entries past its last snapshot; anything else is not.
func TestStaleLastLog(t *testing.T) {
	empty := raft.NewInmemStore()
	held := raft.NewInmemStore()
	if err := held.StoreLog(&raft.Log{Index: 7, Term: 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store raft.LogStore
		stats map[string]string
		stale bool
	}{
		{"emptied past the snapshot", empty, raftStats("604", "305"), true},
		{"emptied at the snapshot", empty, raftStats("305", "305"), false},
		{"never written", empty, raftStats("0", "0"), false},
		{"entries held", held, raftStats("604", "305"), false},
	} {
		err := staleLastLog(tc.store, tc.stats)
		if (err != nil) != tc.stale {
			t.Errorf("%s: got %v, want stale: %v", tc.name, err, tc.stale)
		}
		if err != nil && !strings.Contains(err.Error(), "last log index is 604") {
			t.Errorf("%s: %v does not say raft's last log index", tc.name, err)
		}
	}
}

// The watch returns the state once the store says it was emptied into it,
// nil when ctx is done, and nil at once for a store that never empties
// itself (boltdb: no issue 697).
func TestWatchStaleLastLog(t *testing.T) {
	watch := func(ctx context.Context, store raft.LogStore, stats map[string]string) <-chan error {
		done := make(chan error, 1)
		go func() { done <- WatchStaleLastLog(ctx, store, func() map[string]string { return stats }) }()
		return done
	}
	result := func(done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not return")
			return nil
		}
	}

	if err := result(watch(context.Background(), raft.NewInmemStore(), raftStats("604", "305"))); err != nil {
		t.Fatalf("a store without the Emptied notice: %v, want nil", err)
	}

	w := openWAL(t, t.TempDir(), 64<<10)
	storeEntries(t, w, 1, 20, 1, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := watch(ctx, w, raftStats("604", "305"))
	if err := w.DeleteRange(1, 10); err != nil { // entries 11-20 stay
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("returned %v while the store held entries", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := w.DeleteRange(11, 20); err != nil {
		t.Fatal(err)
	}
	if err := result(done); err == nil {
		t.Fatal("an emptied store under raft's stale last log index: nil, want the error")
	}

	ctx, cancel = context.WithCancel(context.Background())
	done = watch(ctx, w, raftStats("604", "305"))
	cancel()
	if err := result(done); err != nil {
		t.Fatalf("after ctx was done: %v, want nil", err)
	}
}
