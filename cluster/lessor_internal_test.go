package cluster

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// fakeClock is the lessor's clock in these tests: time moves only when
// told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock               { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func (c *fakeClock) lessor(rate int) *lessor { return newLessor(c.now, rate, leaseTick) }
func leasedPlugin(alloc string, ttl time.Duration) *api.PluginInfo {
	return &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: alloc, NodeID: "h1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}, TTL: api.Duration(ttl)}
}

// stateOf applies registrations of ps, in order, at indexes 1, 2, ...
func stateOf(t *testing.T, ps ...*api.PluginInfo) *fsm.State {
	t.Helper()
	f := fsm.New(nil)
	for i, p := range ps {
		cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: p})
		if err != nil {
			t.Fatal(err)
		}
		if res := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: cmd}).(*fsm.ApplyResult); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	return f.State()
}

func allocsOf(batch []fsm.ExpiredLease) string {
	var out []string
	for _, e := range batch {
		out = append(out, fmt.Sprintf("%s@%d", e.AllocID, e.ModifyIndex))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func renew(l *lessor, st *fsm.State, alloc string) error {
	_, err := l.renew(api.RenewRequest{Type: "csi", Name: "ebs", AllocID: alloc}, st)
	return err
}

// A new leader gives every lease of the state a full TTL from its start;
// a renewal moves a deadline a TTL on from the renewal; what is not
// renewed comes due at its deadline, not before.
func TestLessorGrantsRenewsAndExpires(t *testing.T) {
	clock := newFakeClock()
	st := stateOf(t, leasedPlugin("a1", 2*time.Second), leasedPlugin("a2", 2*time.Second), leasedPlugin("plain", 0))
	l := clock.lessor(1000)
	l.grantAll(st)
	if l.len() != 2 {
		t.Fatalf("%d leases, want 2 (the plain registration has none)", l.len())
	}
	clock.advance(1500 * time.Millisecond)
	if err := renew(l, st, "a1"); err != nil {
		t.Fatal(err)
	}
	if b := l.due(); len(b) != 0 {
		t.Fatalf("due before any deadline: %s", allocsOf(b))
	}
	clock.advance(500 * time.Millisecond) // a2's deadline
	if b := allocsOf(l.due()); b != "a2@2" {
		t.Fatalf("due %q, want a2@2", b)
	}
	clock.advance(1499 * time.Millisecond)
	if b := l.due(); len(b) != 0 {
		t.Fatalf("a1 due before its renewed deadline: %s", allocsOf(b))
	}
	clock.advance(time.Millisecond)
	if b := allocsOf(l.due()); b != "a1@1" {
		t.Fatalf("due %q, want a1@1", b)
	}
}

// The renewals the lessor refuses, each with the error it answers.
func TestLessorRenewRefusals(t *testing.T) {
	clock := newFakeClock()
	st := stateOf(t, leasedPlugin("a1", time.Second), leasedPlugin("plain", 0))
	l := clock.lessor(1000)
	l.grantAll(st)
	cases := []struct {
		name string
		req  api.RenewRequest
		want error
	}{
		{"no such instance", api.RenewRequest{Type: "csi", Name: "ebs", AllocID: "nope"}, api.ErrNotFound},
		{"registered without a TTL", api.RenewRequest{Type: "csi", Name: "ebs", AllocID: "plain"}, api.ErrNotFound},
		{"another node's", api.RenewRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfNodeID: "h2"}, api.ErrConflict},
		{"its own node's", api.RenewRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfNodeID: "h1"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := l.renew(tc.req, st); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("renew: %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("under expiry", func(t *testing.T) {
		clock.advance(time.Second)
		if b := l.due(); len(b) != 1 {
			t.Fatalf("due %d", len(b))
		}
		if err := renew(l, st, "a1"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("renewal of a lease under expiry: %v", err)
		}
	})
}

// An expiry that failed puts its leases back, due again; one that applied
// ends them.
func TestLessorSettled(t *testing.T) {
	clock := newFakeClock()
	st := stateOf(t, leasedPlugin("a1", time.Second), leasedPlugin("a2", time.Second))
	l := clock.lessor(1000)
	l.grantAll(st)
	clock.advance(time.Second)
	batch := l.due()
	l.settled(batch, errors.New("leadership lost"))
	if l.len() != 2 {
		t.Fatalf("%d leases after a failed expiry", l.len())
	}
	clock.advance(leaseTick)
	again := l.due()
	if allocsOf(again) != allocsOf(batch) {
		t.Fatalf("due again %q, want %q", allocsOf(again), allocsOf(batch))
	}
	l.settled(again, nil)
	if l.len() != 0 {
		t.Fatalf("%d leases after the expiry applied", l.len())
	}
}

// The lessor follows the leader's events: a registration with a TTL
// starts a lease, a new registration of the instance starts it afresh, one
// without a TTL or a removal ends it, and a reset keeps the leases of the
// registrations it still holds as they ran.
func TestLessorFollowsEvents(t *testing.T) {
	clock := newFakeClock()
	l := clock.lessor(1000)
	l.grantAll(stateOf(t))
	ev := func(typ api.EventType, alloc string, ttl time.Duration, index uint64) *api.Event {
		p := leasedPlugin(alloc, ttl)
		p.ModifyIndex = index
		return &api.Event{Index: index, EventType: typ, Info: p}
	}
	l.observe(ev(api.EventRegistered, "a1", time.Second, 1))
	l.observe(ev(api.EventRegistered, "a2", time.Second, 2))
	l.observe(ev(api.EventRegistered, "a3", time.Second, 3))
	l.observe(ev(api.EventRegistered, "plain", 0, 4))
	if l.len() != 3 {
		t.Fatalf("%d leases, want 3", l.len())
	}
	clock.advance(900 * time.Millisecond)
	l.observe(ev(api.EventUpdated, "a1", time.Second, 5)) // a new registration: a full TTL again
	l.observe(ev(api.EventUpdated, "a2", 0, 6))           // no TTL any more
	l.observe(ev(api.EventDeregistered, "a3", time.Second, 3))
	if l.len() != 1 {
		t.Fatalf("%d leases, want 1", l.len())
	}
	clock.advance(100 * time.Millisecond)
	if b := l.due(); len(b) != 0 {
		t.Fatalf("due: %s", allocsOf(b))
	}
	// A reset: a1 as it was (its lease runs on), b1 new (a full TTL).
	a1, b1 := leasedPlugin("a1", time.Second), leasedPlugin("b1", 3*time.Second)
	a1.ModifyIndex, b1.ModifyIndex = 5, 7
	l.observe(&api.Event{Index: 7, EventType: api.EventReset, Plugins: []*api.PluginInfo{a1, b1}})
	clock.advance(900 * time.Millisecond)
	if b := allocsOf(l.due()); b != "a1@5" {
		t.Fatalf("due after the reset: %q, want a1@5", b)
	}
	l.observe(&api.Event{Index: 8, EventType: api.EventReset, Plugins: nil})
	if l.len() != 0 {
		t.Fatalf("%d leases after an empty reset", l.len())
	}
}

// A renewal can find a registration in the leader's state before the
// lessor has read the events that led to it (an older registration of the
// instance, its removal, the new one): that older news leaves the lease
// the renewal started as it runs.
func TestLessorIgnoresOlderNews(t *testing.T) {
	clock := newFakeClock()
	l := clock.lessor(1000)
	l.grantAll(stateOf(t))
	old, now := leasedPlugin("a1", time.Second), leasedPlugin("a1", time.Second)
	old.ModifyIndex = 1
	st := stateOf(t, leasedPlugin("x", 0), leasedPlugin("a1", 2*time.Second)) // a1 at index 2
	if err := renew(l, st, "a1"); err != nil {
		t.Fatalf("renewal found in the state: %v", err)
	}
	now.ModifyIndex, now.TTL = 2, api.Duration(2*time.Second)
	clock.advance(1500 * time.Millisecond)
	for _, ev := range []*api.Event{
		{Index: 1, EventType: api.EventRegistered, Info: old},
		{Index: 2, EventType: api.EventDeregistered, Info: old},
		{Index: 2, EventType: api.EventRegistered, Info: now}, // the same registration: its lease runs on
	} {
		l.observe(ev)
	}
	if b := l.due(); len(b) != 0 {
		t.Fatalf("due: %s", allocsOf(b))
	}
	clock.advance(500 * time.Millisecond)
	if b := allocsOf(l.due()); b != "a1@2" {
		t.Fatalf("due %q, want a1@2 two seconds after the renewal", b)
	}
}

// The budget spaces a mass expiry: with a rate of 20 a second and a tick
// of 100 ms, no batch holds more than 2, and 50 leases take 25 batches.
// At the default rate the same 50 are one batch.
func TestLessorBudgetSpacesAMassExpiry(t *testing.T) {
	for _, tc := range []struct {
		rate, batch, batches int
	}{
		{20, 2, 25},
		{DefaultLeaseExpiryRate, 50, 1},
		{3, 1, 50}, // under one a tick: one every few ticks
	} {
		t.Run(fmt.Sprint("rate ", tc.rate), func(t *testing.T) {
			clock := newFakeClock()
			var ps []*api.PluginInfo
			for i := range 50 {
				ps = append(ps, leasedPlugin(fmt.Sprint("a", i), time.Second))
			}
			l := clock.lessor(tc.rate)
			l.grantAll(stateOf(t, ps...))
			clock.advance(time.Second)
			batches, total, ticks := 0, 0, 0
			for total < 50 {
				if ticks++; ticks > 10000 {
					t.Fatalf("%d expired after %d ticks", total, ticks)
				}
				b := l.due()
				if len(b) > tc.batch {
					t.Fatalf("a batch of %d, at most %d", len(b), tc.batch)
				}
				if len(b) > 0 {
					batches++
					total += len(b)
					l.settled(b, nil)
				}
				clock.advance(leaseTick)
			}
			if batches != tc.batches {
				t.Fatalf("%d batches, want %d", batches, tc.batches)
			}
			// The rate holds over the whole expiry: 50 at r a second
			// take at least 50/r - one batch's worth of ticks.
			if minTicks := int(50/float64(tc.rate)/leaseTick.Seconds()) - tc.batch; ticks < minTicks {
				t.Fatalf("50 expired in %d ticks, at rate %d at least %d", ticks, tc.rate, minTicks)
			}
		})
	}
}

// A health change is no renewal: the lease keeps its deadline and follows
// the registration's new ModifyIndex (the expiry's condition), also when
// it comes while an expiry naming the old index is in flight, which the
// entry will skip: the lease is due again, under its new index.
func TestLessorFollowsHealth(t *testing.T) {
	clock := newFakeClock()
	l := clock.lessor(1000)
	l.grantAll(stateOf(t, leasedPlugin("a1", time.Second), leasedPlugin("a2", time.Second)))
	health := func(alloc string, index uint64) *api.Event {
		p := leasedPlugin(alloc, time.Second)
		p.ModifyIndex = index
		p.Health = &api.InstanceHealth{Status: api.HealthSuspect, Check: api.CheckProbe}
		return &api.Event{Index: index, EventType: api.EventHealth, Info: p}
	}
	clock.advance(900 * time.Millisecond)
	l.observe(health("a1", 7))
	clock.advance(100 * time.Millisecond)
	batch := l.due()
	if got := allocsOf(batch); got != "a1@7 a2@2" && got != "a2@2 a1@7" {
		t.Fatalf("due %q: want a1 under its new index, on its old deadline, and a2", got)
	}
	l.observe(health("a2", 8))
	l.settled(batch, nil)
	clock.advance(leaseTick)
	if got := allocsOf(l.due()); got != "a2@8" {
		t.Fatalf("due again %q, want a2@8", got)
	}
}
