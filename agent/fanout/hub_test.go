package fanout

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/tests/framework/localreg"
)

// Many local subscribers with one filter (spelled differently) share one
// upstream, and each gets exactly what a direct subscription gets; another
// filter gets an upstream of its own.
func TestSubscribersShareOneUpstream(t *testing.T) {
	u := newTestUpstream(t, 0)
	h := newHub(t, u, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	write(t, u.s, 5, "csi", "device")

	const n = 50
	chans := make([]<-chan backend.Event, n)
	var start uint64
	for i := range chans {
		types := []string{"csi", "device"}
		if i%2 == 1 {
			types = []string{"device", "csi", "device"}
		}
		ch, at, err := h.Subscribe(ctx, types, nil, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && at != start {
			t.Fatalf("subscriber %d starts at %d, the first at %d (no write in between)", i, at, start)
		}
		chans[i], start = ch, at
	}
	if got := u.opens.Load(); got != 1 {
		t.Fatalf("%d upstreams opened for one filter, want 1", got)
	}
	last := write(t, u.s, 200, "csi", "device", "net")
	want := direct(t, u.s, []string{"csi", "device"}, start, last)
	var wg sync.WaitGroup
	got := make([][]string, n)
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = collect(t, ch, last)
		}()
	}
	wg.Wait()
	for i := range got {
		same(t, "subscriber", got[i], want)
	}

	if _, _, err := h.Subscribe(ctx, []string{"net"}, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Subscribe(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if got := u.opens.Load(); got != 3 {
		t.Fatalf("%d upstreams opened for three filters, want 3", got)
	}
	if st := h.Stats(); st.Upstreams != 3 || st.Passthroughs != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A subscriber from an index the ring covers is served from it; one from
// an older index gets a passthrough (here a reset from the store, whose
// journal is short too), then moves onto the shared upstream.
func TestSubscribeFromRingOrPassthrough(t *testing.T) {
	u := newTestUpstream(t, 64)
	h := newHub(t, u, func(c *Config) { c.Buffer = 32 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []string{"csi"}
	_, start, err := h.Subscribe(ctx, types, nil, 0) // never read: it falls off, the feed stays
	if err != nil {
		t.Fatal(err)
	}
	last := write(t, u.s, 200, "csi")
	eventually(t, "the shared upstream to reach the last write", func() bool { return feedPos(h, types) >= last })
	// the ring now holds the last 32 events

	t.Run("in the ring", func(t *testing.T) {
		from := last - 10
		ch, at, err := h.Subscribe(ctx, types, &from, 0)
		if err != nil || at != from {
			t.Fatalf("at %d, %v", at, err)
		}
		got, want := collect(t, ch, last), direct(t, u.s, types, from, last)
		equivalent(t, "from the ring", got, want, fold(got), fold(want))
		if st := h.Stats(); st.Passthroughs != 0 {
			t.Fatalf("a passthrough for an index in the ring: %+v", st)
		}
	})
	t.Run("too old", func(t *testing.T) {
		opens := u.opens.Load()
		from := start + 1
		ch, _, err := h.Subscribe(ctx, types, &from, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, ch, last)
		want := direct(t, u.s, types, from, last)
		equivalent(t, "passthrough", got, want, fold(got), fold(want))
		if got[0][:5] != "reset" {
			t.Fatalf("first event %s, want the store's reset", got[0])
		}
		st := h.Stats()
		if st.Passthroughs == 0 && u.opens.Load() == opens {
			// On a slow machine the shared feed itself fell behind the
			// store's short journal and holds a reset: the subscriber
			// was served from that reset (the other valid path). The
			// reset check above covered it; there is no passthrough to
			// move.
			t.Log("served from a reset in the ring, not a passthrough")
			return
		}
		if st.Passthroughs != 1 || u.opens.Load() != opens+1 {
			t.Fatalf("stats %+v, opens %d (were %d)", st, u.opens.Load(), opens)
		}
		// Caught up, it moves onto the shared upstream and drops its own.
		eventually(t, "the passthrough to move onto the ring", func() bool { return h.Stats().ActivePassthroughs == 0 })
		eventually(t, "the passthrough's upstream to close", func() bool { return u.live.Load() == 1 })
		last2 := write(t, u.s, 5, "csi") // registrations only: the store's short journal keeps them
		same(t, "after the move", collect(t, ch, last2), direct(t, u.s, types, last, last2))
	})
}

// The upstream breaks in the middle of an index's events, and then again
// and again under load: the local subscribers still see one gapless,
// duplicate-free sequence, identical to a direct subscription's.
func TestUpstreamBreaksMidIndex(t *testing.T) {
	u := newTestUpstream(t, 0)
	h := newHub(t, u, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// node0 gets 5 plugins; its DeregisterNode makes 5 events at one
	// index. The first upstream dies after 5+2 change events: mid-index.
	ctx0 := context.Background()
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		if _, err := u.s.RegisterPlugin(ctx0, plugin("csi", name, "x"+name, "node0")); err != nil {
			t.Fatal(err)
		}
		_ = i
	}
	u.cutAfter.Store(7)
	from := uint64(0)
	ch, _, err := h.Subscribe(ctx, nil, &from, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	res, err := u.s.DeregisterNode(ctx0, "node0")
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, res.Index)
	same(t, "across a mid-index break", got, direct(t, u.s, nil, 0, res.Index))
	if u.opens.Load() < 2 {
		t.Fatal("the upstream was never cut")
	}

	// Now break every upstream often while writing.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				u.breakAll()
			}
		}
	}()
	last := write(t, u.s, 400, "csi", "device")
	got = collect(t, ch, last)
	close(stop)
	wg.Wait()
	same(t, "across many breaks", got, direct(t, u.s, nil, res.Index, last))
	t.Logf("%d upstream opens", u.opens.Load())
}

// A subscriber that stops reading delays no other; once its next event
// left the ring its channel is closed, and a resume from the last index
// it received continues without gap or duplicate.
func TestSlowSubscriber(t *testing.T) {
	u := newTestUpstream(t, 0)
	h := newHub(t, u, func(c *Config) { c.Buffer = 64; c.SubscriberBuffer = 4 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []string{"csi"}
	slow, start, err := h.Subscribe(ctx, types, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	fast, _, err := h.Subscribe(ctx, types, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The writer waits for the fast subscriber every 10 writes: on a busy
	// machine a free-running writer can push it off the 64-event ring too,
	// and the test is about the slow one alone falling behind.
	const n = 500
	var fastEvents []string
	var last uint64
	for i := 0; i < n; i += 10 {
		last = writeRange(t, u.s, i, i+10, "csi")
		fastEvents = append(fastEvents, collect(t, fast, last)...)
	}
	if last != n {
		t.Fatalf("last index %d, want %d", last, n)
	}
	want := direct(t, u.s, types, start, last)
	same(t, "fast subscriber", fastEvents, want)

	var got []backend.Event
	for ev := range slow { // drains what it holds, then sees the close
		got = append(got, ev)
	}
	if h.Stats().FellBehind != 1 {
		t.Fatalf("stats %+v", h.Stats())
	}
	// Resume as client.Watch does: from the last whole index, skipping
	// the events of the index after it that were already received.
	lastIdx := got[len(got)-1].Index
	var whole uint64
	had := 0
	for _, ev := range got {
		if ev.Index < lastIdx {
			whole = ev.Index
		} else {
			had++
		}
	}
	resumed, _, err := h.Subscribe(ctx, types, &whole, 0)
	if err != nil {
		t.Fatal(err)
	}
	rest := collect(t, resumed, last)
	var all []string
	for _, ev := range got {
		all = append(all, describe(ev.Event))
	}
	for i := 0; i < had; i++ {
		if rest[i] != all[len(all)-had+i] {
			t.Fatalf("resumed stream's event %d is %s, had %s", i, rest[i], all[len(all)-had+i])
		}
	}
	same(t, "slow subscriber, resumed", append(all, rest[had:]...), want)
}

func feedPos(h *Hub, types []string) uint64 {
	_, key := canonical(types)
	h.mu.Lock()
	f := h.feeds[key]
	h.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pos
}

// An upstream with no subscriber left is closed after Linger; a new
// subscriber opens it again.
func TestIdleUpstreamCloses(t *testing.T) {
	u := newTestUpstream(t, 0)
	h := newHub(t, u, func(c *Config) { c.Linger = 20 * time.Millisecond })
	for round := 1; round <= 2; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		ch, _, err := h.Subscribe(ctx, []string{"csi"}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if u.live.Load() != 1 || h.Stats().Upstreams != 1 {
			t.Fatalf("round %d: %d live upstreams, stats %+v", round, u.live.Load(), h.Stats())
		}
		cancel()
		for range ch {
		}
		eventually(t, "the idle upstream to close", func() bool { return u.live.Load() == 0 && h.Stats().Upstreams == 0 })
		if got := u.opens.Load(); got != int64(round) {
			t.Fatalf("round %d: %d opens", round, got)
		}
	}
}

// Close while subscribers (reading, stuck, on a passthrough) are active
// closes every channel and returns; goleak checks nothing is left.
func TestCloseWithActiveSubscribers(t *testing.T) {
	u := newTestUpstream(t, 16)
	h := newHub(t, u, func(c *Config) { c.Buffer = 8 })
	ctx := context.Background()
	reading, _, err := h.Subscribe(ctx, nil, nil, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	stuck, _, err := h.Subscribe(ctx, []string{"csi"}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	write(t, u.s, 100, "csi")
	zero := uint64(0)
	pass, _, err := h.Subscribe(ctx, nil, &zero, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range reading {
		}
	}()
	h.Close()
	h.Close()
	<-done
	for _, ch := range []<-chan backend.Event{stuck, pass} {
		for range ch {
		}
	}
	if _, _, err := h.Subscribe(ctx, nil, nil, 0); err != ErrClosed {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	if u.live.Load() != 0 {
		t.Fatalf("%d upstreams still open", u.live.Load())
	}
}

// A client agent opens at most MaxUpstreams server subscriptions: one
// more filter is refused (api.ErrTooManyRequests, HTTP 429), the filters
// already open still serve. Before, every distinct filter opened one more
// stream at a server, without end.
func TestMaxUpstreams(t *testing.T) {
	u := newTestUpstream(t, 0)
	h := newHub(t, u, func(c *Config) { c.MaxUpstreams = 2 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, typ := range []string{"a", "b"} {
		if _, _, err := h.Subscribe(ctx, []string{typ}, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := h.Subscribe(ctx, []string{"c"}, nil, 0); !errors.Is(err, api.ErrTooManyRequests) {
		t.Fatalf("a third filter: %v, want too many requests", err)
	}
	if _, _, err := h.Subscribe(ctx, []string{"b"}, nil, 0); err != nil {
		t.Fatalf("an open filter: %v", err)
	}
	if got := u.opens.Load(); got != 2 {
		t.Fatalf("%d upstreams opened, want 2", got)
	}
}

// An upstream whose history ends before the feed's position (the cluster
// was restored from a backup behind it) starts below it, with a reset:
// the feed takes it (api.Cursor.Resumed) and its subscribers get the
// reset, then the events after it.
func TestRewoundUpstream(t *testing.T) {
	u := newTestUpstream(t, 0)
	h := newHub(t, u, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _, err := h.Subscribe(ctx, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	top := write(t, u.s, 20, "csi")
	collect(t, ch, top)

	restored := localreg.New(0)
	t.Cleanup(restored.Shutdown)
	at := write(t, restored, 5, "csi")
	u.rewind(restored)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ev.EventType == api.EventHeartbeat {
				continue
			}
			if ev.EventType != api.EventReset || ev.Index != at {
				t.Fatalf("after the rewind: %s, want a reset at %d", describe(ev.Event), at)
			}
			next := writeRange(t, restored, 5, 6, "csi")
			if got := collect(t, ch, next); len(got) != 1 {
				t.Fatalf("after the reset: %v, want the one new event at %d", got, next)
			}
			return
		case <-deadline:
			t.Fatal("no reset after the rewind")
		}
	}
}

// Two local subscribers of one feed receive each change as one event with
// one set of encodings (backend.Event.Shared), so the HTTP stream encodes
// it once for both; heartbeats are each subscriber's own.
func TestSubscribersShareEncodings(t *testing.T) {
	u := newTestUpstream(t, 0)
	h := newHub(t, u, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, _, err := h.Subscribe(ctx, []string{"csi"}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := h.Subscribe(ctx, []string{"csi"}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	write(t, u.s, 1, "csi")
	change := func(ch <-chan backend.Event) backend.Event {
		t.Helper()
		for {
			select {
			case ev := <-ch:
				if ev.EventType != api.EventHeartbeat {
					return ev
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no change within 10s")
			}
		}
	}
	ea, eb := change(a), change(b)
	if ea.Shared == nil || ea.Shared != eb.Shared || ea.Event != eb.Event {
		t.Fatalf("subscribers got events %p/%p with encodings %p/%p: want one, shared", ea.Event, eb.Event, ea.Shared, eb.Shared)
	}
}

// A subscriber from an index in the ring hears where it stands as soon
// as it has the events after it, not a heartbeat period later (registry's
// TestAResumedStreamHearsWhereItStandsAtOnce says why).
func TestASubscriberHearsWhereItStandsOnceCaughtUp(t *testing.T) {
	u := newTestUpstream(t, 1024)
	h := newHub(t, u, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []string{"csi"}
	if _, _, err := h.Subscribe(ctx, types, nil, 0); err != nil {
		t.Fatal(err)
	}
	last := write(t, u.s, 20, "csi")
	eventually(t, "the shared upstream to reach the last write", func() bool { return feedPos(h, types) >= last })
	from := last - 3
	ch, _, err := h.Subscribe(ctx, types, &from, time.Hour) // never due: only catching up sends it
	if err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("channel closed")
			}
			if ev.EventType != api.EventHeartbeat {
				continue
			}
			if ev.Index != last {
				t.Fatalf("heartbeat at %d, want one at the feed's position %d", ev.Index, last)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatalf("no heartbeat within 10s of the replay from %d (feed at %d)", from, last)
		}
	}
}
