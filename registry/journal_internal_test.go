package registry

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/fsm"
)

// An applied batch wakes only the waiters at or below its index (etcd's
// wait registry): the others stay queued, not woken to sleep again.
func TestAppliedWakesOnlyTheWaitersItReached(t *testing.T) {
	j := NewJournal(0)
	f := fsm.New(j)
	for _, idx := range []uint64{3, 2, 5} {
		go j.WaitForIndex(context.Background(), idx)
	}
	queued := func() []uint64 {
		j.mu.Lock()
		defer j.mu.Unlock()
		var out []uint64
		for _, w := range j.waiters {
			out = append(out, w.index)
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(queued()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("waiters queued: %v", queued())
		}
		time.Sleep(time.Millisecond)
	}
	f.ApplyBatch(nil) // nothing applied: nobody woken
	if q := queued(); len(q) != 3 {
		t.Fatalf("an empty batch woke waiters: %v left", q)
	}
	f.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogNoop}, {Index: 2, Type: raft.LogNoop}, {Index: 3, Type: raft.LogNoop}})
	if q := queued(); len(q) != 1 || q[0] != 5 {
		t.Fatalf("after index 3, queued %v, want [5]", q)
	}
	j.Close()
}
