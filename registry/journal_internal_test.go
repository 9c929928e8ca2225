package registry

import (
	"context"
	"strconv"
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

// Only the newest sharedWindow events keep the shared event and encodings
// of their first delivery; an older one read by a late reader is shared
// with nobody and kept by nobody: what the ring holds in encodings is
// bounded by the window, not by -journal-size.
func TestOnlyTheNewestEventsKeepTheirSharedEncodings(t *testing.T) {
	const events = sharedWindow + 1000
	j := NewJournal(events + 10)
	f := fsm.New(j)
	for i := range events {
		cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: strconv.Itoa(i), ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}})
		if err != nil {
			t.Fatal(err)
		}
		f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: cmd})
	}
	kept := func() (n int) {
		j.mu.Lock()
		defer j.mu.Unlock()
		for i := range j.n {
			if j.ring[(j.start+i)%len(j.ring)].shared != nil {
				n++
			}
		}
		return n
	}
	// A late reader from the start: every event delivered, shared ones
	// (equal for two reads) only within the window.
	w := newWaiter(Filter{})
	b := j.read(w, 0, Filter{}, true, events)
	if len(b.events) != events {
		t.Fatalf("read %d events, want %d", len(b.events), events)
	}
	if n := kept(); n != sharedWindow {
		t.Fatalf("%d events keep their shared encodings, want the newest %d", n, sharedWindow)
	}
	again := j.read(newWaiter(Filter{}), 0, Filter{}, true, events)
	if again.events[0].shared == b.events[0].shared {
		t.Fatal("an event past the window was shared between two late readers: it is kept")
	}
	if last := events - 1; again.events[last].shared != b.events[last].shared {
		t.Fatal("the newest event was not shared between two readers")
	}
	// New events move the window: the oldest kept one lets go.
	cmd, _ := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "next", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}})
	f.Apply(&raft.Log{Index: events + 1, Type: raft.LogCommand, Data: cmd})
	if n := kept(); n != sharedWindow-1 {
		t.Fatalf("%d events keep their shared encodings after one more, want %d", n, sharedWindow-1)
	}
}
