package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/otlptest"
	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// The rolling restart of docs/operations.md, under continuous writes from
// the Go client: every server in turn, leadership transferred away first
// when it leads, SIGTERM, start again, wait until autopilot says every
// server is healthy. No write fails or ends unknown, and a watcher on each
// server sees every acknowledged write, in order, without a reset.
func TestRollingRestartLosesNoWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts three servers")
	}
	// PLUGREG_OLD_BIN: the cluster starts on that build (the previous
	// release's) and each server is restarted onto this tree's: the
	// upgrade, with both versions replicating together meanwhile.
	newBin := proctest.Build(t, "./cmd/plugreg")
	oldBin := cmp.Or(os.Getenv("PLUGREG_OLD_BIN"), newBin)
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: oldBin})
	c.WaitReady(t)
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.HTTP)
	}
	rotated := func(i int) []string { return append(append([]string{}, addrs[i:]...), addrs[:i]...) }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A watcher per server (it fails over, as clients do, when its
	// server restarts, and must resume without a reset).
	first, err := c.Servers[0].API.Register(ctx, &api.PluginInfo{Type: "roll", Name: "first", AllocID: "0", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/roll.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	from := first.Index
	type seen struct {
		mu      sync.Mutex
		indexes []uint64
		resets  int
	}
	watchers := make([]*seen, len(addrs))
	wctx, stopWatch := context.WithCancel(ctx)
	var wwg sync.WaitGroup
	for i := range addrs {
		wc, err := client.New(client.Config{Addrs: rotated(i)})
		if err != nil {
			t.Fatal(err)
		}
		w := &seen{}
		watchers[i] = w
		ch := wc.Stream(wctx, from, client.WatchOptions{Types: []string{"roll"}}).Events()
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for ev := range ch {
				w.mu.Lock()
				if ev.EventType == api.EventReset {
					w.resets++
				} else {
					w.indexes = append(w.indexes, ev.Index)
				}
				w.mu.Unlock()
			}
		}()
	}

	// Writers, each with every server in its own order.
	var (
		mu       sync.Mutex
		acked    []uint64
		failures []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for k := 0; k < 4; k++ {
		cl, err := client.New(client.Config{Addrs: rotated(k % len(addrs))})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
				p := &api.PluginInfo{Type: "roll", Name: fmt.Sprintf("w%d", k), AllocID: fmt.Sprintf("a%d", i%20), Version: fmt.Sprint(i),
					ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/roll.sock"}}
				res, err := cl.Register(wctx, p)
				wcancel()
				mu.Lock()
				if err != nil {
					failures = append(failures, fmt.Sprintf("writer %d, write %d: %v", k, i, err))
				} else {
					acked = append(acked, res.Index)
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	written := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	time.Sleep(time.Second)

	healthy := func(via *proctest.Agent) (bool, string) { return allHealthy(ctx, c, via) }
	leaderOf := func(via *proctest.Agent) (string, error) { return leaderNameVia(ctx, via) }
	// Two rounds: the second restarts servers that were restarted once.
	for n := 0; n < 2*len(c.Servers); n++ {
		i := n % len(c.Servers)
		s := c.Servers[i]
		other := c.Servers[(i+1)%len(c.Servers)]
		leader, err := leaderOf(other)
		if err != nil {
			t.Fatal(err)
		}
		if leader == s.Name && os.Getenv("ROLLING_NO_TRANSFER") == "" {
			if _, err := s.API.TransferLeadership(ctx); err != nil {
				t.Fatalf("transfer leadership away from %s: %v", s.Name, err)
			}
			c.Poll(t, "leadership away from "+s.Name, func() (bool, string) {
				l, err := leaderOf(other)
				return err == nil && l != "" && l != s.Name, fmt.Sprint(l, err)
			})
		}
		before, began := written(), time.Now()
		if _, ok := s.Stop(t); !ok {
			t.FailNow()
		}
		s.Bin = newBin
		s.Start(t)
		c.Poll(t, "every server healthy after restarting "+s.Name, func() (bool, string) { return healthy(other) })
		t.Logf("restarted %s in %v; %d writes meanwhile", s.Name, time.Since(began).Round(time.Millisecond), written()-before)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Fatalf("%d of %d writes failed, first: %s", len(failures), len(failures)+len(acked), failures[0])
	}
	if len(acked) == 0 {
		t.Fatal("no write")
	}
	sort.Slice(acked, func(i, j int) bool { return acked[i] < acked[j] })
	last := acked[len(acked)-1]
	// Every watcher, gapless: each acknowledged write's index, in order.
	for i, w := range watchers {
		c.Poll(t, fmt.Sprintf("watcher %d at index %d", i, last), func() (bool, string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			n := len(w.indexes)
			return n > 0 && w.indexes[n-1] >= last, fmt.Sprint(n)
		})
	}
	stopWatch()
	wwg.Wait()
	for i, w := range watchers {
		if w.resets != 0 {
			t.Errorf("watcher %d: %d resets", i, w.resets)
		}
		got := map[uint64]bool{}
		for j, idx := range w.indexes {
			if j > 0 && idx <= w.indexes[j-1] {
				t.Errorf("watcher %d: index %d after %d", i, idx, w.indexes[j-1])
			}
			got[idx] = true
		}
		missing := 0
		for _, idx := range acked {
			if !got[idx] {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("watcher %d misses %d of %d acknowledged writes", i, missing, len(acked))
		}
	}
	t.Logf("%d writes through three restarts, none failed; %d watchers gapless", len(acked), len(watchers))
}

// allHealthy: autopilot, asked through via, says all three servers are
// healthy (or, on a release before autopilot health, every server answers
// a linearizable read).
func allHealthy(ctx context.Context, c *proctest.Cluster, via *proctest.Agent) (bool, string) {
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	defer hcancel()
	h, err := via.API.AutopilotHealth(hctx)
	if err != nil && strings.Contains(err.Error(), "no route") {
		for _, s := range c.Servers {
			if _, _, err := s.API.List(hctx, "roll", nil); err != nil {
				return false, s.Name + ": " + err.Error()
			}
		}
		return true, ""
	}
	return err == nil && h.Healthy && len(h.Servers) == 3, fmt.Sprintf("%+v %v", h, err)
}

// leaderNameVia is the leader's name as via knows it ("" when none).
func leaderNameVia(ctx context.Context, via *proctest.Agent) (string, error) {
	h, err := via.API.AutopilotHealth(ctx)
	if err == nil {
		return h.Leader, nil
	}
	ms, merr := via.API.Members(ctx)
	if merr != nil {
		return "", err
	}
	for _, m := range ms {
		if m.Leader {
			return m.Name, nil
		}
	}
	return "", nil
}

// A cluster in the middle of an upgrade (PLUGREG_OLD_BIN: the previous
// release's build): one server runs this tree's binary, two the old one.
// Writes through the new server, registrations in protobuf and
// deregistrations plain and conditional, succeed while it follows and
// while it leads, and every server stays up and agrees: the new server
// writes only entries the old ones apply (a log entry an old server does
// not know stops it, and a forwarded one is refused by an old leader).
// The new servers trace every request (-trace-sample-rate 1): the trace
// context in the internal RPC's header and in forwarded batches reaches
// an old leader, and in the log's entries old followers, which must
// ignore both. Then the others are upgraded and the writes go on.
func TestMixedVersionsWriteWhatEveryServerApplies(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts three servers")
	}
	newBin := proctest.Build(t, "./cmd/plugreg")
	oldBin := os.Getenv("PLUGREG_OLD_BIN")
	if oldBin == "" {
		t.Log("PLUGREG_OLD_BIN is not set: every server runs this tree's binary (no version skew)")
		oldBin = newBin
	}
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: oldBin})
	c.WaitReady(t)
	rcv := otlptest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	upgrade := func(s *proctest.Agent) {
		t.Helper()
		if l, _ := leaderNameVia(ctx, c.Servers[(slices.Index(c.Servers, s)+1)%3]); l == s.Name {
			if _, err := s.API.TransferLeadership(ctx); err != nil {
				t.Fatalf("transfer leadership away from %s: %v", s.Name, err)
			}
		}
		if _, ok := s.Stop(t); !ok {
			t.FailNow()
		}
		s.Bin = newBin
		s.Args = append(s.Args, "-trace-endpoint", rcv.URL, "-trace-sample-rate", "1")
		s.Start(t)
		c.Poll(t, "every server healthy after upgrading "+s.Name, func() (bool, string) { return allHealthy(ctx, c, c.Servers[0]) })
	}
	// writes registers and deregisters through s for a while, and fails
	// the test on any error.
	round := 0
	writes := func(s *proctest.Agent) {
		t.Helper()
		round++
		cl, err := client.New(client.Config{Addrs: []string{s.HTTP}, Protobuf: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a refused write is retried
		defer cancel()
		for i := 0; i < 30; i++ {
			p := &api.PluginInfo{Type: "mixed", Name: fmt.Sprintf("r%d", round), AllocID: fmt.Sprint(i % 5), NodeID: "n1",
				Options: map[string]string{"i": fmt.Sprint(i)}, ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/mixed.sock"}}
			res, err := cl.Register(ctx, p)
			if err != nil {
				t.Fatalf("register through %s: %v", s.Name, err)
			}
			switch i % 3 {
			case 1:
				_, err = cl.Deregister(ctx, p.Type, p.Name, p.AllocID)
			case 2:
				_, err = cl.DeregisterIf(ctx, api.DeregisterRequest{Type: p.Type, Name: p.Name, AllocID: p.AllocID, IfNodeID: "n1", IfModifyIndex: res.Index})
			}
			if err != nil {
				t.Fatalf("deregister through %s: %v", s.Name, err)
			}
		}
		// Writes at once, which a follower forwards together (ApplyBatch,
		// with their traces).
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := &api.PluginInfo{Type: "mixed", Name: fmt.Sprintf("burst%d", round), AllocID: fmt.Sprint(i), NodeID: "n1",
					ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/mixed.sock"}}
				if _, err := cl.Register(ctx, p); err != nil {
					errs <- fmt.Errorf("register through %s: %w", s.Name, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// agree: every server is up and lists what s lists.
	agree := func(s *proctest.Agent) {
		t.Helper()
		c.Poll(t, "every server healthy", func() (bool, string) { return allHealthy(ctx, c, s) })
		want, _, err := s.API.List(ctx, "mixed", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range c.Servers {
			got, _, err := o.API.List(ctx, "mixed", nil)
			if err != nil || len(got) != len(want) {
				t.Fatalf("%s lists %d instances (%v), %s %d", o.Name, len(got), err, s.Name, len(want))
			}
		}
	}

	upgraded := c.Servers[0]
	upgrade(upgraded)
	for range 2 { // as a follower, then as the leader
		writes(upgraded)
		agree(upgraded)
		for i := 0; i < 10; i++ {
			l, err := leaderNameVia(ctx, upgraded)
			if err != nil {
				t.Fatal(err)
			}
			if l == upgraded.Name {
				break
			}
			leader := c.Servers[slices.IndexFunc(c.Servers, func(a *proctest.Agent) bool { return a.Name == l })]
			if _, err := leader.API.TransferLeadership(ctx); err != nil {
				t.Fatalf("transfer leadership away from %s: %v", l, err)
			}
			c.Poll(t, "a new leader", func() (bool, string) {
				n, err := leaderNameVia(ctx, upgraded)
				return err == nil && n != "" && n != l, n
			})
		}
	}
	for _, s := range c.Servers[1:] {
		upgrade(s)
	}
	writes(c.Servers[2])
	agree(c.Servers[2])
	c.Poll(t, "the new servers' spans at the collector", func() (bool, string) {
		applied := map[string]bool{}
		for _, s := range rcv.Spans("") {
			if s.Name == "fsm.apply" {
				applied[s.Node] = true
			}
		}
		return len(applied) == 3, fmt.Sprint(applied)
	})
}
