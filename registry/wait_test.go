package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/registry"
)

// WaitForIndex returns once the index is applied, not before; a waiter
// for a later index stays waiting through the batches below it, until its
// own, its ctx's end or the journal's close.
func TestWaitForIndex(t *testing.T) {
	j := registry.NewJournal(0)
	f := fsm.New(j)
	apply := func(index uint64) {
		t.Helper()
		cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: plugin("csi", "ebs", fmt.Sprint("a", index))})
		if err != nil {
			t.Fatal(err)
		}
		f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: cmd})
	}
	ctx := context.Background()
	apply(1)
	if s, err := j.WaitForIndex(ctx, 1); err != nil || s.Index() != 1 {
		t.Fatalf("an applied index: %v %v", s, err)
	}
	type result struct {
		want uint64
		at   uint64
		err  error
	}
	done := make(chan result, 4)
	wait := func(ctx context.Context, index uint64) {
		s, err := j.WaitForIndex(ctx, index)
		r := result{want: index, err: err}
		if s != nil {
			r.at = s.Index()
		}
		done <- r
	}
	for _, idx := range []uint64{3, 2, 5} {
		go wait(ctx, idx)
	}
	cctx, cancel := context.WithCancel(ctx)
	go wait(cctx, 9)
	time.Sleep(50 * time.Millisecond) // let them queue (if not, they see the state: as good)
	apply(2)
	apply(3)
	for range 2 {
		r := <-done
		if r.err != nil || r.at < r.want || r.want > 3 {
			t.Fatalf("after index 3: %+v", r)
		}
	}
	select {
	case r := <-done:
		t.Fatalf("woken before its index: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if r := <-done; r.want != 9 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a cancelled wait: %+v", r)
	}
	j.Close()
	if r := <-done; r.want != 5 || !errors.Is(r.err, registry.ErrShutdown) {
		t.Fatalf("a wait through Close: %+v", r)
	}
}
