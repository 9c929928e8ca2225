package registry_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"testing"
	"time"

	"github.com/plugreg/plugreg/registry"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

func TestWatchDeliversInOrder(t *testing.T) {
	s := newStore(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all, _ := s.Watch(ctx, registry.Filter{}, 0)
	csi, _ := s.Watch(ctx, registry.Filter{Types: []string{"csi"}}, 0)
	two, _ := s.Watch(ctx, registry.Filter{Types: []string{"csi", "device"}}, 0)

	mustRegister(t, s, plugin("csi", "ebs", "a1"))
	mustRegister(t, s, plugin("net", "cni", "c1"))
	mustRegister(t, s, plugin("device", "gpu", "g1"))
	mustRegister(t, s, plugin("csi", "ebs", "a2"))
	mustRegister(t, s, plugin("csi", "ebs", "a2")) // unchanged: no event
	p := plugin("csi", "ebs", "a1")
	p.Version = "2"
	mustRegister(t, s, p)                       // updated, moves to front
	s.DeregisterPlugin(ctx, "csi", "ebs", "zz") // absent: no event
	s.DeregisterNode(ctx, "n1")                 // every plugin() is on n1

	want := map[string][]string{
		"all": {
			"registered:csi/ebs/a1@1>a1", "registered:net/cni/c1@2>c1", "registered:device/gpu/g1@3>g1",
			"registered:csi/ebs/a2@4>a2", "updated:csi/ebs/a1@6>a1",
			"deregistered:csi/ebs/a1@8>a2", "deregistered:csi/ebs/a2@8>-",
			"deregistered:device/gpu/g1@8>-", "deregistered:net/cni/c1@8>-",
		},
		"csi": {
			"registered:csi/ebs/a1@1>a1", "registered:csi/ebs/a2@4>a2", "updated:csi/ebs/a1@6>a1",
			"deregistered:csi/ebs/a1@8>a2", "deregistered:csi/ebs/a2@8>-",
		},
		"two": {
			"registered:csi/ebs/a1@1>a1", "registered:device/gpu/g1@3>g1",
			"registered:csi/ebs/a2@4>a2", "updated:csi/ebs/a1@6>a1",
			"deregistered:csi/ebs/a1@8>a2", "deregistered:csi/ebs/a2@8>-", "deregistered:device/gpu/g1@8>-",
		},
	}
	for name, ch := range map[string]<-chan *api.Event{"all": all, "csi": csi, "two": two} {
		t.Run(name, func(t *testing.T) {
			for i, w := range want[name] {
				if got := describe(next(t, ch)); got != w {
					t.Fatalf("event %d: %s, want %s", i, got, w)
				}
			}
			none(t, ch)
		})
	}
}

// A reader can list, then watch from the list's index, and miss nothing
// that happened in between.
func TestListThenWatchMissesNothing(t *testing.T) {
	s := newStore(t, 0)
	for i := 0; i < 5; i++ {
		mustRegister(t, s, plugin("csi", fmt.Sprintf("n%d", i), "a"))
	}
	list, idx := s.ListPlugins("csi")
	// Writes land after the list but before the watch starts.
	mustRegister(t, s, plugin("csi", "late1", "a"))
	mustRegister(t, s, plugin("csi", "late2", "a"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _ := s.Watch(ctx, registry.Filter{Types: []string{"csi"}}, idx)
	if len(list) != 5 || idx != 5 {
		t.Fatalf("list %d at %d", len(list), idx)
	}
	for _, w := range []string{"registered:csi/late1/a@6>a", "registered:csi/late2/a@7>a"} {
		if got := describe(next(t, ch)); got != w {
			t.Fatalf("got %s, want %s", got, w)
		}
	}
	none(t, ch)
}

// A watch from an index the node has not applied yet waits for it, and
// never replays what is at or below it.
func TestWatchFromFutureIndexWaits(t *testing.T) {
	s := newStore(t, 0)
	mustRegister(t, s, plugin("csi", "a", "1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _ := s.Watch(ctx, registry.Filter{}, 3)
	none(t, ch)
	mustRegister(t, s, plugin("csi", "b", "1")) // 2
	mustRegister(t, s, plugin("csi", "c", "1")) // 3
	none(t, ch)
	mustRegister(t, s, plugin("csi", "d", "1")) // 4
	if got := describe(next(t, ch)); got != "registered:csi/d/1@4>1" {
		t.Fatalf("got %s", got)
	}
}

// Resuming from an index older than the journal yields exactly one reset
// carrying the full state at its index, then the events after it.
func TestWatchFromTrimmedIndexResets(t *testing.T) {
	s := newStore(t, 4)
	for i := 0; i < 10; i++ {
		mustRegister(t, s, plugin("csi", fmt.Sprintf("n%d", i), "a"))
	}
	mustRegister(t, s, plugin("device", "gpu", "g"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ch, _ := s.Watch(ctx, registry.Filter{Types: []string{"csi"}}, 2)
	ev := next(t, ch)
	if ev.EventType != api.EventReset || ev.Index != 11 || len(ev.Plugins) != 10 {
		t.Fatalf("got %s, want reset@11 with 10 csi plugins", describe(ev))
	}
	for _, p := range ev.Plugins {
		if p.Type != "csi" {
			t.Fatalf("reset carries %s outside the filter", p.Type)
		}
	}
	none(t, ch)
	mustRegister(t, s, plugin("csi", "n0", "b"))
	if got := describe(next(t, ch)); got != "registered:csi/n0/b@12>b" {
		t.Fatalf("after reset: %s", got)
	}

	// From an index still in the journal: no reset.
	ch2, _ := s.Watch(ctx, registry.Filter{}, 10)
	if got := describe(next(t, ch2)); got != "registered:device/gpu/g@11>g" {
		t.Fatalf("in-journal resume: %s", got)
	}
}

// All events of one entry are delivered or none: a journal that trimmed
// part of an entry's events makes a reader below it reset.
func TestTrimmedEntryIsNeverHalfDelivered(t *testing.T) {
	s := newStore(t, 3)
	for i := 0; i < 5; i++ {
		p := plugin("csi", fmt.Sprintf("n%d", i), "a")
		mustRegister(t, s, p)
	}
	s.DeregisterNode(context.Background(), "n1") // 5 events at index 6; ring keeps 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _ := s.Watch(ctx, registry.Filter{}, 5)
	if ev := next(t, ch); ev.EventType != api.EventReset || ev.Index != 6 || len(ev.Plugins) != 0 {
		t.Fatalf("got %s, want reset@6 with nothing", describe(ev))
	}
}

func TestRestoreResetsSubscribers(t *testing.T) {
	src := newStore(t, 0)
	for i := 0; i < 20; i++ {
		mustRegister(t, src, plugin("csi", fmt.Sprintf("n%d", i), "a"))
	}
	var buf bytes.Buffer
	if err := fsm.WriteState(&buf, src.FSM().State()); err != nil {
		t.Fatal(err)
	}

	s := newStore(t, 0)
	mustRegister(t, s, plugin("csi", "old", "a"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _ := s.Watch(ctx, registry.Filter{}, 0)
	if got := describe(next(t, ch)); got != "registered:csi/old/a@1>a" {
		t.Fatalf("got %s", got)
	}
	if err := s.FSM().Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	ev := next(t, ch)
	if ev.EventType != api.EventReset || ev.Index != 20 || len(ev.Plugins) != 20 {
		t.Fatalf("after restore: %s, want reset@20(20)", describe(ev))
	}
	mustRegister(t, s, plugin("csi", "new", "a"))
	if got := describe(next(t, ch)); got != "registered:csi/new/a@21>a" {
		t.Fatalf("after reset: %s", got)
	}
}

// PluginsUpdatedCh stays open, in order, until ctx is cancelled.
func TestPluginsUpdatedCh(t *testing.T) {
	s := newStore(t, 0)
	mustRegister(t, s, plugin("csi", "before", "a"))
	ctx, cancel := context.WithCancel(context.Background())
	ch := s.PluginsUpdatedCh(ctx, "csi")
	mustRegister(t, s, plugin("device", "gpu", "g"))
	mustRegister(t, s, plugin("csi", "ebs", "a1"))
	if got := describe(next(t, ch)); got != "registered:csi/ebs/a1@3>a1" {
		t.Fatalf("got %s", got)
	}
	none(t, ch)
	cancel()
	if _, ok := <-ch; ok {
		t.Fatal("event after cancel")
	}
}

// One subscriber never reads, one reads, 100k writes. The writer and the
// live reader are never held up by the stuck one; the live one sees every
// event in order; the stuck one, when it reads again, gets what it had
// buffered and then exactly one reset carrying the whole state.
func TestStuckSubscriberDoesNotBlock(t *testing.T) {
	const writes = 100_000
	const journal = 32_768
	s := newStore(t, journal)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, _ := s.Watch(ctx, registry.Filter{}, 0)
	live, _ := s.Watch(ctx, registry.Filter{}, 0)

	got := make(chan uint64, 1)
	liveErr := make(chan error, 1)
	go func() {
		var last uint64
		for ev := range live {
			if ev.EventType != api.EventRegistered || ev.Index != last+1 {
				liveErr <- fmt.Errorf("live subscriber got %s after %d", describe(ev), last)
				return
			}
			last = ev.Index
			select {
			case got <- last:
			default:
			}
			if last == writes {
				liveErr <- nil
				return
			}
		}
	}()
	var seen uint64
	for i := 1; i <= writes; i++ {
		mustRegister(t, s, plugin("csi", fmt.Sprintf("n%d", i%1000), fmt.Sprintf("a%d", i)))
		// Keep the live reader within half the journal of the writer, so
		// the test cannot fail on a slow machine: the property under test
		// is that the stuck reader holds nobody up.
		for uint64(i)-seen > journal/2 {
			seen = <-got
		}
	}
	if err := <-liveErr; err != nil {
		t.Fatal(err)
	}

	// The stuck subscriber had its channel buffer filled from the start.
	var last uint64
	for {
		ev := next(t, stuck)
		if ev.EventType == api.EventReset {
			if ev.Index != writes || len(ev.Plugins) != writes {
				t.Fatalf("reset at %d with %d plugins, want %d/%d", ev.Index, len(ev.Plugins), writes, writes)
			}
			break
		}
		if ev.Index != last+1 {
			t.Fatalf("stuck subscriber skipped from %d to %d without a reset", last, ev.Index)
		}
		last = ev.Index
	}
	if last == 0 || last > journal {
		t.Fatalf("stuck subscriber read %d events before its reset", last)
	}
	none(t, stuck)
}

// Every delivery subscriber of one event gets the same one (the journal's
// records, one set of encodings per event per node); a plain watcher gets
// a deep copy, whose changes reach nobody else.
func TestSubscribersShareOneEncoding(t *testing.T) {
	s := newStore(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, _ := s.Deliver(ctx, registry.Filter{}, 0, 0)
	b, _ := s.Deliver(ctx, registry.Filter{Types: []string{"csi"}}, 0, 0)
	mustRegister(t, s, plugin("csi", "ebs", "a1"))
	ea, eb := next(t, a), next(t, b)
	// The plain watcher reads the slot after the delivery streams shared
	// it: it must still get a copy of its own (CI caught it getting the
	// shared one when the reads fell in this order).
	c, _ := s.Watch(ctx, registry.Filter{}, 0)
	ec := next(t, c)
	if ea.Shared == nil || ea.Shared != eb.Shared {
		t.Fatalf("encodings %p %p: want one, shared", ea.Shared, eb.Shared)
	}
	if ea.Event != eb.Event || ea.Info != eb.Info {
		t.Fatal("two delivery subscribers got different events")
	}
	if ec.Info == ea.Info || ec.Current == ea.Current {
		t.Fatal("a plain watcher got the journal's record")
	}
	ec.Info.Version = "changed by c"
	late, _ := s.Deliver(ctx, registry.Filter{}, 0, 0)
	if got := next(t, late).Info.Version; got == "changed by c" {
		t.Fatal("a copy's change reached the journal")
	}
	line := 0
	enc := func() ([]byte, error) { line++; return []byte(fmt.Sprint(line)), nil }
	first, _ := ea.Bytes(backend.JSON, enc)
	again, _ := eb.Bytes(backend.JSON, enc)
	if string(first) != "1" || string(again) != "1" || line != 1 {
		t.Fatalf("encoded %d times (%q, %q), want once", line, first, again)
	}
	// Each encoding has its own slot: the other one is made once too.
	other, _ := eb.Bytes(backend.Protobuf, enc)
	otherAgain, _ := ea.Bytes(backend.Protobuf, enc)
	if string(other) != "2" || string(otherAgain) != "2" || line != 2 {
		t.Fatalf("second encoding: got %q, %q after %d encodings, want 2, 2 after 2", other, otherAgain, line)
	}
	// A subscriber's own event (a heartbeat, a reset) shares nothing.
	own := backend.Unshared(&api.Event{EventType: api.EventHeartbeat})
	x, _ := own.Bytes(backend.JSON, enc)
	y, _ := own.Bytes(backend.JSON, enc)
	if string(x) == string(y) {
		t.Fatalf("an unshared event's encodings were memoized: %q, %q", x, y)
	}
}

// The hub's counters: changes applied by kind, subscriptions running,
// events delivered, resets.
func TestHubStats(t *testing.T) {
	// 8 events in a journal of 6: the first watcher, 5 events behind at
	// most, never falls off it however slow; a watcher from index 1
	// does.
	s := newStore(t, 6)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Watch(ctx, registry.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, plugin("csi", "a", "1"))
	p := plugin("csi", "a", "1")
	p.Version = "2"
	mustRegister(t, s, p)
	if _, err := s.DeregisterPlugin(context.Background(), "csi", "a", "1"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		next(t, ch)
	}
	// A watcher from below the journal gets a reset.
	for i := range 5 {
		mustRegister(t, s, plugin("csi", fmt.Sprint("b", i), "1"))
	}
	ch2, err := s.Watch(ctx, registry.Filter{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch2); ev.EventType != api.EventReset {
		t.Fatalf("got %s, want a reset", describe(ev))
	}
	for range 5 {
		next(t, ch)
	}
	st := s.Stats()
	want := map[registry.Change]uint64{{Kind: api.EventRegistered, Type: "csi"}: 6, {Kind: api.EventUpdated, Type: "csi"}: 1, {Kind: api.EventDeregistered, Type: "csi"}: 1}
	if !maps.Equal(st.Changes, want) || st.Watchers != 2 || st.Delivered != 8 || st.Resets != 1 {
		t.Fatalf("stats %+v; want changes %v, 2 watchers, 8 delivered, 1 reset", st, want)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Watchers != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d watchers after their contexts ended", s.Stats().Watchers)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Plugin types are counted by name up to MaxCountedTypes, the rest as
// OtherTypes: a metric's series stay bounded whatever types clients make
// up.
func TestHubStatsBoundTheTypes(t *testing.T) {
	s := newStore(t, 0)
	for i := range registry.MaxCountedTypes + 5 {
		mustRegister(t, s, plugin(fmt.Sprint("t", i), "n", "a"))
	}
	st := s.Stats()
	if len(st.Changes) != registry.MaxCountedTypes+1 {
		t.Fatalf("%d series of changes, want %d types and the rest", len(st.Changes), registry.MaxCountedTypes)
	}
	if n := st.Changes[registry.Change{Kind: api.EventRegistered, Type: registry.OtherTypes}]; n != 5 {
		t.Fatalf("%d changes of other types, want 5", n)
	}
}

// Shutdown ends every subscription, those waiting for events and those
// blocked handing one to a consumer that stopped reading, though none of
// their contexts ends: each subscription's context is cut off with the
// journal (the only way out of a blocked send once the journal's own
// channel is no longer in its select).
func TestShutdownEndsBlockedAndWaitingSubscriptions(t *testing.T) {
	s := newStore(t, 0)
	ctx := context.Background()
	blocked, err := s.Watch(ctx, registry.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := s.Deliver(ctx, registry.Filter{Types: []string{"device"}}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// More than the blocked one's buffer: its goroutine waits in a send.
	for i := range registry.DefaultSubscriptionBuffer + 2 {
		mustRegister(t, s, plugin("csi", "ebs", fmt.Sprint(i)))
	}
	done := make(chan struct{})
	go func() { s.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return: a subscription outlived the journal")
	}
	for range blocked {
	}
	if _, open := <-waiting; open {
		t.Fatal("the waiting subscription delivered after Shutdown")
	}
}
