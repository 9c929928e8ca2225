package fanout

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/tests/framework/localreg"
	"github.com/plugreg/plugreg/tests/framework/testlog"
)

// testUpstream is a real registry store's WatchWithHeartbeat shaped as an
// Upstream, which can be broken (its channels closed, as when a server
// dies) while the store lives on.
type testUpstream struct {
	s        *localreg.Local
	hb       time.Duration
	opens    atomic.Int64
	live     atomic.Int64
	cutAfter atomic.Int64 // > 0: the next upstream opened breaks after this many change events
	wg       sync.WaitGroup

	mu  sync.Mutex
	brk chan struct{} // closed by breakAll
}

func newTestUpstream(t *testing.T, journalSize int) *testUpstream {
	s := localreg.New(journalSize)
	u := &testUpstream{s: s, hb: 20 * time.Millisecond, brk: make(chan struct{})}
	t.Cleanup(func() { u.wg.Wait(); s.Shutdown() })
	return u
}

// store is the registry the upstream serves now (rewind swaps it).
func (u *testUpstream) store() *localreg.Local {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.s
}

// rewind makes the upstream serve s, a registry whose history ends before
// what it served (a cluster restored from a backup), and breaks every
// upstream open.
func (u *testUpstream) rewind(s *localreg.Local) {
	u.mu.Lock()
	u.s = s
	u.mu.Unlock()
	u.breakAll()
}

func (u *testUpstream) open(ctx context.Context, types []string, from *uint64) (<-chan *api.Event, error) {
	u.opens.Add(1)
	s := u.store()
	start := s.Journal().State().Index()
	rewound := from != nil && *from > start
	if from != nil && !rewound {
		start = *from
	}
	ictx, cancel := context.WithCancel(ctx)
	in, err := s.WatchWithHeartbeat(ictx, registry.Filter{Types: types}, start, u.hb)
	if rewound {
		// As a server does for a position past the cluster's history:
		// it starts below it, with a reset.
		in, err = s.WatchFromState(ictx, registry.Filter{Types: types}, u.hb)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	u.mu.Lock()
	brk := u.brk
	u.mu.Unlock()
	cut := u.cutAfter.Swap(0)
	out := make(chan *api.Event)
	u.live.Add(1)
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer u.live.Add(-1)
		defer close(out)
		defer cancel()
		send := func(ev *api.Event) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
			case <-brk:
			}
			return false
		}
		if !send(&api.Event{Index: start, EventType: api.EventHeartbeat}) {
			return
		}
		n := int64(0)
		for ev := range in {
			if !send(ev) {
				return
			}
			if ev.EventType != api.EventHeartbeat {
				if n++; cut > 0 && n == cut {
					return // the server died here
				}
			}
		}
	}()
	return out, nil
}

func (u *testUpstream) breakAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	close(u.brk)
	u.brk = make(chan struct{})
}

func newHub(t *testing.T, u *testUpstream, tune func(*Config)) *Hub {
	t.Helper()
	cfg := Config{
		Upstream: u.open, Buffer: 1024, StallTimeout: 10 * time.Second,
		RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond,
		Logger: testlog.New(t, "", hclog.Debug),
	}
	if tune != nil {
		tune(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func plugin(ptype, name, alloc, node string) *api.PluginInfo {
	return &api.PluginInfo{
		Type: ptype, Name: name, AllocID: alloc, Version: "1", NodeID: node,
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"},
	}
}

// write makes n changes over types, with a DeregisterNode (several events
// at one index) every 10th, and returns the last index.
func write(t *testing.T, s *localreg.Local, n int, types ...string) uint64 {
	t.Helper()
	return writeRange(t, s, 0, n, types...)
}

// writeRange makes changes from to end of the sequence write makes.
func writeRange(t *testing.T, s *localreg.Local, from, end int, types ...string) uint64 {
	t.Helper()
	ctx := context.Background()
	var last uint64
	for i := from; i < end; i++ {
		var res api.WriteResult
		var err error
		if i%10 == 9 {
			res, err = s.DeregisterNode(ctx, fmt.Sprintf("node%d", i/10))
		} else {
			ty := types[i%len(types)]
			res, err = s.RegisterPlugin(ctx, plugin(ty, fmt.Sprintf("p%d", i%4), fmt.Sprintf("a%d", i), fmt.Sprintf("node%d", i/10)))
		}
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, res.Index)
	}
	return last
}

func describe(ev *api.Event) string {
	switch ev.EventType {
	case api.EventReset:
		names := make([]string, len(ev.Plugins))
		for i, p := range ev.Plugins {
			names[i] = p.Type + "/" + p.Name + "/" + p.AllocID
		}
		return fmt.Sprintf("reset@%d(%s)", ev.Index, strings.Join(names, ","))
	case api.EventHeartbeat:
		return fmt.Sprintf("heartbeat@%d", ev.Index)
	}
	return fmt.Sprintf("%s:%s/%s/%s@%d", ev.EventType, ev.Info.Type, ev.Info.Name, ev.Info.AllocID, ev.Index)
}

// collect reads ch until it holds an event at index >= upTo (and every
// later event of that index has had time to come: it reads on until a
// heartbeat at >= upTo, or 200ms of silence), checking the stream's
// promises on the way: indexes never decrease, and a heartbeat never runs
// ahead of an undelivered event.
func collect(t *testing.T, ch <-chan backend.Event, upTo uint64) []string {
	t.Helper()
	var out []string
	var lastEv, lastHB uint64
	deadline := time.After(30 * time.Second)
	reached := false
	for {
		var quiet <-chan time.Time
		if reached {
			quiet = time.After(200 * time.Millisecond)
		}
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %d events (last index %d)", len(out), lastEv)
			}
			if ev.EventType == api.EventHeartbeat {
				if ev.Index < lastEv || ev.Index < lastHB {
					t.Fatalf("heartbeat@%d behind event %d / heartbeat %d", ev.Index, lastEv, lastHB)
				}
				lastHB = ev.Index
				if ev.Index >= upTo {
					return out
				}
				continue
			}
			if ev.Index < lastEv || ev.Index <= lastHB {
				t.Fatalf("%s after event %d / heartbeat %d", describe(ev.Event), lastEv, lastHB)
			}
			lastEv = ev.Index
			out = append(out, describe(ev.Event))
			reached = reached || ev.Index >= upTo
		case <-quiet:
			return out
		case <-deadline:
			t.Fatalf("no event at %d within 30s; have %d, last %d", upTo, len(out), lastEv)
		}
	}
}

// direct is what a subscription straight at the store delivers.
func direct(t *testing.T, s *localreg.Local, types []string, from, upTo uint64) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.Deliver(ctx, registry.Filter{Types: types}, from, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, ch, upTo)
}

// equivalent is same when neither stream holds a reset; otherwise (the
// hub may serve an older, equally valid reset than the store would) both
// must start with a reset and fold to the same state at the same index.
func equivalent(t *testing.T, what string, got, want []string, gotState, wantState string) {
	t.Helper()
	hasReset := func(s []string) bool { return len(s) > 0 && strings.HasPrefix(s[0], "reset") }
	if !hasReset(got) && !hasReset(want) {
		same(t, what, got, want)
		return
	}
	// Both end at the same index (the reference may end on a reset of
	// its own, taken later: a valid way to deliver the same state).
	lastIndex := func(s []string) string {
		e := s[len(s)-1]
		e = e[strings.LastIndex(e, "@")+1:]
		if i := strings.IndexByte(e, '('); i >= 0 {
			e = e[:i]
		}
		return e
	}
	if !hasReset(got) || gotState != wantState || lastIndex(got) != lastIndex(want) {
		t.Fatalf("%s: got %v\nfolding to %s\nwant %v\nfolding to %s", what, got, gotState, want, wantState)
	}
}

func same(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: the reference is empty", what)
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: event %d is %s, want %s", what, i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
}

// fold applies described events to a state and renders it.
func fold(evs []string) string {
	state := map[string]bool{}
	for _, e := range evs {
		if strings.HasPrefix(e, "reset@") {
			clear(state)
			list := e[strings.Index(e, "(")+1 : len(e)-1]
			for _, p := range strings.Split(list, ",") {
				if p != "" {
					state[p] = true
				}
			}
			continue
		}
		kind, rest, _ := strings.Cut(e, ":")
		key, _, _ := strings.Cut(rest, "@")
		state[key] = kind != "deregistered"
	}
	var keys []string
	for k, ok := range state {
		if ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// eventually polls cond for up to 30s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
