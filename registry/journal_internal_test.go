package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
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

// A waiter whose context ended leaves the queue at once, not when its
// index is applied: a node cut off from its leader applies nothing while
// its forwarded writes time out, one waiter each.
func TestEndedWaitersLeaveTheQueue(t *testing.T) {
	j := NewJournal(0)
	defer j.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 100)
	for i := 1; i <= 100; i++ {
		go func() { _, err := j.WaitForIndex(ctx, uint64(i)); errs <- err }()
	}
	queued := func() int {
		j.mu.Lock()
		defer j.mu.Unlock()
		return len(j.waiters)
	}
	deadline := time.Now().Add(10 * time.Second)
	for queued() < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued; want 100", queued())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	for range 100 {
		if err := <-errs; err != context.Canceled {
			t.Fatalf("an ended wait: %v", err)
		}
	}
	if n := queued(); n != 0 {
		t.Fatalf("%d waiters left after their contexts ended; want 0", n)
	}
	// The heap is still one: a later waiter is woken by its index.
	done := make(chan error, 1)
	go func() { _, err := j.WaitForIndex(context.Background(), 1); done <- err }()
	for queued() < 1 {
		time.Sleep(time.Millisecond)
	}
	fsm.New(j).ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogNoop}})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// ACLChanged is closed by a batch that changes the tokens (a create, a
// delete, a restore with other tokens), and only by such a batch: a
// plugin write or a refused ACL command leaves the streams' tokens
// unchecked.
func TestACLChangedOnlyOnTokenChanges(t *testing.T) {
	j := NewJournal(0)
	f := fsm.New(j)
	tok := fsm.ACLToken{AccessorID: "acc-1", SecretHash: strings.Repeat("ab", 32), Policies: []api.ACLPolicy{{Kind: api.ACLRead}}}
	plugin := &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a1", NodeID: "n1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/e.sock"}}
	cases := []struct {
		name    string
		req     fsm.Request
		changed bool
	}{
		{"a plugin write", &fsm.RegisterRequest{Plugin: plugin}, false},
		{"a token created", &fsm.ACLTokenSetRequest{Token: tok}, true},
		{"the same token again (refused)", &fsm.ACLTokenSetRequest{Token: tok}, false},
		{"an absent token deleted", &fsm.ACLTokenDeleteRequest{AccessorID: "acc-2"}, false},
		{"the token deleted", &fsm.ACLTokenDeleteRequest{AccessorID: "acc-1"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := j.ACLChanged()
			cmd, err := fsm.EncodeCommand(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			f.ApplyBatch([]*raft.Log{{Index: f.State().Index() + 1, Term: 1, Type: raft.LogCommand, Data: cmd}})
			select {
			case <-ch:
				if !tc.changed {
					t.Fatal("closed without a token change")
				}
			default:
				if tc.changed {
					t.Fatal("not closed by a token change")
				}
			}
		})
	}
}
