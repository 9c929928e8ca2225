package registry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

func testPlugin(ptype, name, alloc string) *api.PluginInfo {
	return &api.PluginInfo{
		Type: ptype, Name: name, AllocID: alloc, Version: "1", NodeID: "n1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"},
	}
}

// register applies a registration of p to f at the next index, as the
// log would, and returns that index.
func register(t testing.TB, f *fsm.FSM, p *api.PluginInfo) uint64 {
	t.Helper()
	cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	index := f.State().Index() + 1
	f.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: cmd}})
	return index
}

// parked is how many subscriptions wait in j's index.
func parked(j *Journal) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.waiting.parked
}

// waitParked returns once n subscriptions wait in j's index.
func waitParked(t testing.TB, j *Journal, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for parked(j) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions parked, want %d", parked(j), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// An applied event wakes the waiting subscriptions whose filter can match
// it, and no other: a write of one type costs nothing to the subscribers
// of the others. The ones left parked have still read up to the state.
func TestAnEventWakesOnlyTheSubscriptionsItCanMatch(t *testing.T) {
	j := NewJournal(0)
	f := fsm.New(j)
	filters := map[string]Filter{
		"all":          {},
		"csi":          {Types: []string{"csi"}},
		"device":       {Types: []string{"device"}},
		"csi or dev":   {Types: []string{"csi", "device"}},
		"csi/ebs":      {Types: []string{"csi"}, Names: []string{"ebs"}},
		"csi/efs":      {Types: []string{"csi"}, Names: []string{"efs"}},
		"any type/ebs": {Names: []string{"ebs"}},
	}
	waiters := map[string]*waiter{}
	cursors := map[string]uint64{}
	for name, flt := range filters {
		waiters[name] = newWaiter(flt)
	}
	cases := []struct {
		write *api.PluginInfo
		woken []string
	}{
		{testPlugin("csi", "ebs", "a1"), []string{"all", "csi", "csi or dev", "csi/ebs", "any type/ebs"}},
		{testPlugin("csi", "efs", "a1"), []string{"all", "csi", "csi or dev", "csi/efs"}},
		{testPlugin("device", "gpu", "g1"), []string{"all", "device", "csi or dev"}},
		{testPlugin("net", "ebs", "c1"), []string{"all", "any type/ebs"}},
		{testPlugin("net", "cni", "c1"), []string{"all"}},
	}
	for _, tc := range cases {
		t.Run(tc.write.Type+"/"+tc.write.Name, func(t *testing.T) {
			for name, w := range waiters {
				b := j.read(w, cursors[name], filters[name], false, readBatch)
				if len(b.events) != 0 || b.wait == nil {
					t.Fatalf("%s: read %d events before the write", name, len(b.events))
				}
				cursors[name] = b.cursor
			}
			index := register(t, f, tc.write)
			for name, w := range waiters {
				var woken bool
				select {
				case <-w.wake:
					woken = true
				default:
				}
				if want := slices.Contains(tc.woken, name); woken != want {
					t.Errorf("%s: woken %v, want %v", name, woken, want)
				}
				b := j.read(w, cursors[name], filters[name], false, readBatch)
				if got := len(b.events); woken && got != 1 || !woken && got != 0 {
					t.Errorf("%s (woken %v) read %d events", name, woken, got)
				}
				if b.cursor != index {
					t.Errorf("%s: cursor %d after the write at %d", name, b.cursor, index)
				}
				cursors[name] = b.cursor
			}
		})
	}
	for _, w := range waiters {
		j.leave(w)
	}
	if j.waiting.parked != 0 || len(j.waiting.groups) != 0 {
		t.Fatalf("the index holds %d subscriptions in %d groups after they all left", j.waiting.parked, len(j.waiting.groups))
	}
}

// A subscription whose filter matches none of the events that pushed its
// cursor out of the journal's ring was never woken by them, yet it is
// not reset: it is past them (heartbeats say so), and its next matching
// event comes as an event.
func TestAQuietSubscriberOutlivesTheRing(t *testing.T) {
	const ring = 4
	cases := []struct {
		name      string
		filter    Filter
		deliver   bool
		heartbeat time.Duration
	}{
		{"watch of a type", Filter{Types: []string{"csi"}}, false, 0},
		{"delivery stream of a type", Filter{Types: []string{"csi"}}, true, 0},
		{"watch of a name", Filter{Names: []string{"ebs"}}, false, 0},
		{"watch with heartbeats", Filter{Types: []string{"csi"}}, false, 20 * time.Millisecond},
		{"delivery stream with heartbeats", Filter{Types: []string{"csi"}, Names: []string{"ebs"}}, true, 20 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, f, hub := newJournalHub(t, ring)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			next := subscribe(t, ctx, hub, tc.filter, tc.deliver, tc.heartbeat)

			first := register(t, f, testPlugin("csi", "ebs", "a1"))
			if ev := nextChange(t, next); ev.EventType != api.EventRegistered || ev.Index != first {
				t.Fatalf("first event: %s at %d", ev.EventType, ev.Index)
			}
			waitParked(t, j, 1)
			var last uint64
			for i := range 5 * ring {
				last = register(t, f, testPlugin("device", "gpu", fmt.Sprint("g", i)))
			}
			if j.floor <= first {
				t.Fatalf("the ring's floor %d: the test needs it past the subscriber's cursor %d", j.floor, first)
			}
			if tc.heartbeat > 0 {
				waitHeartbeat(t, next, last)
			}
			index := register(t, f, testPlugin("csi", "ebs", "a2"))
			if ev := nextChange(t, next); ev.EventType != api.EventRegistered || ev.Index != index {
				t.Fatalf("after %d events of another type: %s at %d, want the registration at %d", 5*ring, ev.EventType, ev.Index, index)
			}
		})
	}
}

// A restore wakes every waiting subscription, whatever its filter, and
// each resets to the restored state.
func TestRestoreWakesEveryWaitingSubscription(t *testing.T) {
	src := fsm.New(NewJournal(0))
	for i := range 5 {
		register(t, src, testPlugin("csi", "ebs", fmt.Sprint("a", i)))
	}
	var snap bytes.Buffer
	if err := fsm.WriteState(&snap, src.State()); err != nil {
		t.Fatal(err)
	}
	j, f, hub := newJournalHub(t, 0)
	register(t, f, testPlugin("net", "cni", "c1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	filters := []Filter{{}, {Types: []string{"csi"}}, {Types: []string{"device"}}, {Names: []string{"ebs"}}, {Types: []string{"net"}, Names: []string{"cni"}}}
	var streams []func() *api.Event
	for _, flt := range filters {
		streams = append(streams, subscribe(t, ctx, hub, flt, false, 0))
	}
	waitParked(t, j, len(filters))
	if err := f.Restore(io.NopCloser(&snap)); err != nil {
		t.Fatal(err)
	}
	for i, next := range streams {
		if ev := next(); ev.EventType != api.EventReset || ev.Index != 5 {
			t.Fatalf("filter %+v after a restore: %s at %d, want a reset at 5", filters[i], ev.EventType, ev.Index)
		}
	}
}

// subscribe starts a watch (or a delivery stream) on hub from its
// journal's index and returns its next event, failing after a deadline.
func subscribe(t testing.TB, ctx context.Context, hub *Hub, flt Filter, deliver bool, heartbeat time.Duration) func() *api.Event {
	t.Helper()
	if deliver {
		ch, err := hub.Deliver(ctx, flt, hub.Journal().State().Index(), heartbeat)
		if err != nil {
			t.Fatal(err)
		}
		return func() *api.Event { return receive(t, ch).Event }
	}
	ch, err := hub.WatchWithHeartbeat(ctx, flt, hub.Journal().State().Index(), heartbeat)
	if err != nil {
		t.Fatal(err)
	}
	return func() *api.Event { return receive(t, ch) }
}

func receive[E any](t testing.TB, ch <-chan E) E {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	panic("unreachable")
}

// nextChange is the next event that is not a heartbeat.
func nextChange(t testing.TB, next func() *api.Event) *api.Event {
	t.Helper()
	for {
		if ev := next(); ev.EventType != api.EventHeartbeat {
			return ev
		}
	}
}

// waitHeartbeat returns once a heartbeat carries index; it fails on any
// other event.
func waitHeartbeat(t testing.TB, next func() *api.Event, index uint64) {
	t.Helper()
	for {
		ev := next()
		if ev.EventType != api.EventHeartbeat {
			t.Fatalf("%s at %d while waiting for a heartbeat at %d", ev.EventType, ev.Index, index)
		}
		if ev.Index == index {
			return
		}
		if ev.Index > index {
			t.Fatalf("heartbeat at %d, past %d", ev.Index, index)
		}
	}
}

// Delivery streams that reset to one state with one filter get one
// reset: the state's records, encoded once; a plain watch gets its own
// copy, and another filter its own reset.
func TestDeliveryStreamsShareAReset(t *testing.T) {
	_, f, hub := newJournalHub(t, 2)
	for i := range 6 {
		register(t, f, testPlugin("csi", fmt.Sprint("n", i%3), fmt.Sprint("a", i)))
		register(t, f, testPlugin("device", "gpu", fmt.Sprint("g", i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resetOf := func(flt Filter) backend.Event {
		ch, err := hub.Deliver(ctx, flt, 1, 0) // below the ring: a reset
		if err != nil {
			t.Fatal(err)
		}
		ev := receive(t, ch)
		if ev.EventType != api.EventReset {
			t.Fatalf("%s, want a reset", ev.EventType)
		}
		return ev
	}
	csi := Filter{Types: []string{"csi"}}
	a, b := resetOf(csi), resetOf(Filter{Types: []string{"csi", "csi"}})
	if a.Shared == nil || a.Event != b.Event || a.Shared != b.Shared {
		t.Fatalf("two delivery streams of one filter got resets %p/%p, encodings %p/%p: want one, shared", a.Event, b.Event, a.Shared, b.Shared)
	}
	if len(a.Plugins) != 6 {
		t.Fatalf("the reset carries %d plugins, want 6", len(a.Plugins))
	}
	records := map[*api.PluginInfo]bool{}
	f.State().Walk(func(_, _ string, list []*api.PluginInfo) bool {
		for _, p := range list {
			records[p] = true
		}
		return true
	})
	for _, p := range a.Plugins {
		if !records[p] {
			t.Fatalf("a shared reset copied %s/%s/%s", p.Type, p.Name, p.AllocID)
		}
	}
	if other := resetOf(Filter{Types: []string{"csi"}, Names: []string{"n1"}}); other.Event == a.Event || len(other.Plugins) != 2 {
		t.Fatalf("another filter's reset: shared %v, %d plugins, want its own with 2", other.Event == a.Event, len(other.Plugins))
	}
	w, err := hub.Watch(ctx, csi, 1)
	if err != nil {
		t.Fatal(err)
	}
	own := receive(t, w)
	if own.EventType != api.EventReset || len(own.Plugins) != 6 {
		t.Fatalf("a watch got %s with %d plugins, want a reset with 6", own.EventType, len(own.Plugins))
	}
	for _, p := range own.Plugins {
		if records[p] {
			t.Fatal("a plain watch got the state's record in its reset")
		}
	}
	// A later state: a new reset.
	register(t, f, testPlugin("csi", "n9", "z"))
	for range 3 {
		register(t, f, testPlugin("device", "gpu", "z"))
	}
	if later := resetOf(csi); later.Event == a.Event || len(later.Plugins) != 7 {
		t.Fatalf("a reset of a later state: the old one %v, %d plugins, want a new one with 7", later.Event == a.Event, len(later.Plugins))
	}
}

// A subscription that ends leaves the index: a type nobody watches any
// more holds no memory, and no write walks the ended ones.
func TestEndedSubscriptionsLeaveTheIndex(t *testing.T) {
	j := NewJournal(0)
	hub, err := NewHub(j, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	filters := []Filter{{}, {Types: []string{"csi"}}, {Names: []string{"ebs"}}, {Types: []string{"csi", "device"}, Names: []string{"ebs", "gpu"}}}
	const each = 25
	for _, flt := range filters {
		for range each {
			subscribe(t, ctx, hub, flt, false, 0)
		}
	}
	waitParked(t, j, each*len(filters))
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for hub.Watchers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions still running", hub.Watchers())
		}
		time.Sleep(time.Millisecond)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.waiting.parked != 0 || len(j.waiting.groups) != 0 {
		t.Fatalf("after every subscription ended: %d parked, %d groups", j.waiting.parked, len(j.waiting.groups))
	}
}

// A filter takes a plugin of one of its types and one of its names (none:
// any); two filters share a key exactly when they take the same plugins.
func TestFilterMatchAndKey(t *testing.T) {
	csiEBS, csiEFS, devEBS := testPlugin("csi", "ebs", "a"), testPlugin("csi", "efs", "a"), testPlugin("device", "ebs", "a")
	cases := []struct {
		name   string
		filter Filter
		takes  []*api.PluginInfo
		same   Filter // a filter with the same key
		other  Filter // one with another key
	}{
		{"everything", Filter{}, []*api.PluginInfo{csiEBS, csiEFS, devEBS}, Filter{Types: []string{}}, Filter{Types: []string{"csi"}}},
		{"a type", Filter{Types: []string{"csi"}}, []*api.PluginInfo{csiEBS, csiEFS}, Filter{Types: []string{"csi", "csi"}}, Filter{Names: []string{"csi"}}},
		{"a name", Filter{Names: []string{"ebs"}}, []*api.PluginInfo{csiEBS, devEBS}, Filter{Names: []string{"ebs"}}, Filter{Types: []string{"ebs"}}},
		{"types and names", Filter{Types: []string{"device", "csi"}, Names: []string{"ebs"}}, []*api.PluginInfo{csiEBS, devEBS}, Filter{Types: []string{"csi", "device"}, Names: []string{"ebs"}}, Filter{Types: []string{"csi\"\"device"}, Names: []string{"ebs"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []*api.PluginInfo{csiEBS, csiEFS, devEBS} {
				if got, want := tc.filter.Match(p), slices.Contains(tc.takes, p); got != want {
					t.Errorf("%s/%s: match %v, want %v", p.Type, p.Name, got, want)
				}
			}
			if tc.filter.key() != tc.same.key() {
				t.Errorf("%+v and %+v have keys %q and %q", tc.filter, tc.same, tc.filter.key(), tc.same.key())
			}
			if tc.filter.key() == tc.other.key() {
				t.Errorf("%+v and %+v share key %q", tc.filter, tc.other, tc.filter.key())
			}
		})
	}
}

// A stream resumed in the middle of the journal hears where it stands as
// soon as it has replayed what follows its position, not a heartbeat
// period later: a consumer that resumes below an index whose events it
// has taken (it cannot know the index whole without a heartbeat) replays
// that index, and when the last entry changes no plugin, only the
// heartbeat tells it the stream is at the end. With a stall timeout
// shorter than the period it reconnected forever, one index short.
func TestAResumedStreamHearsWhereItStandsAtOnce(t *testing.T) {
	for _, deliver := range []bool{false, true} {
		t.Run(fmt.Sprint("deliver=", deliver), func(t *testing.T) {
			_, f, hub := newJournalHub(t, 0)
			from := register(t, f, testPlugin("csi", "ebs", "a1"))
			taken := register(t, f, testPlugin("csi", "ebs", "a2"))
			quiet := taken + 1 // a leader's no-op: the index moves, no event
			f.ApplyBatch([]*raft.Log{{Index: quiet, Term: 1, Type: raft.LogNoop}})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const period = time.Hour // never due: only catching up sends it
			var next func() *api.Event
			if deliver {
				ch, err := hub.Deliver(ctx, Filter{}, from, period)
				if err != nil {
					t.Fatal(err)
				}
				next = func() *api.Event { return receive(t, ch).Event }
			} else {
				ch, err := hub.WatchWithHeartbeat(ctx, Filter{}, from, period)
				if err != nil {
					t.Fatal(err)
				}
				next = func() *api.Event { return receive(t, ch) }
			}
			if ev := next(); ev.EventType != api.EventRegistered || ev.Index != taken {
				t.Fatalf("first event: %s at %d, want the registration at %d", ev.EventType, ev.Index, taken)
			}
			if ev := next(); ev.EventType != api.EventHeartbeat || ev.Index != quiet {
				t.Fatalf("after the replay: %s at %d, want a heartbeat at %d", ev.EventType, ev.Index, quiet)
			}
			// Once: the period governs the heartbeats after it.
			later := register(t, f, testPlugin("csi", "ebs", "a3"))
			if ev := next(); ev.EventType != api.EventRegistered || ev.Index != later {
				t.Fatalf("next: %s at %d, want the registration at %d", ev.EventType, ev.Index, later)
			}
		})
	}
}

// newJournalHub is a journal of ring events, the FSM that feeds it and a
// hub on it, shut down with the test.
func newJournalHub(t testing.TB, ring int) (*Journal, *fsm.FSM, *Hub) {
	t.Helper()
	j := NewJournal(ring)
	f := fsm.New(j)
	hub, err := NewHub(j, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Shutdown)
	return j, f, hub
}
