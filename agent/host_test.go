package agent_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

func hostPlugin(name, alloc string) *api.PluginInfo {
	p := plugin("", name, alloc)
	p.Options = map[string]string{api.OptionSource: api.SourceKubelet}
	return p
}

func startHost(t *testing.T, w agent.Writer, interval time.Duration) (*agent.Host, context.CancelFunc) {
	t.Helper()
	h, err := agent.NewHost(agent.HostConfig{Backend: w, Sources: []string{api.SourceKubelet}, SyncInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	return h, func() { cancel(); <-done }
}

// Anti-entropy: what the host has is registered (again, after its node was
// reaped), what it has stopped having is removed, an unchanged
// registration is never rewritten, and what is not the host's (another
// node's, or registered by hand) is left alone.
func TestHostAntiEntropy(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := c.Leader().Backend()
	get := func(name, alloc string) *api.PluginInfo {
		res, err := srv.Query(ctx, api.Query{Kind: api.QueryInstance, Type: "csi", Name: name, AllocID: alloc})
		if err != nil || len(res.Plugins) != 1 {
			return nil
		}
		return res.Plugins[0]
	}

	h, stop := startHost(t, cn.Client, time.Hour) // rounds only when asked
	defer stop()
	if err := h.Register(ctx, hostPlugin("ebs", "a1")); err != nil {
		t.Fatal(err)
	}
	first := get("ebs", "a1")
	if first == nil || first.NodeID != "client1" || first.Options[api.OptionSource] != api.SourceKubelet {
		t.Fatalf("registered through the host: %+v", first)
	}
	// Instances the host does not own: one by hand on its node, one of
	// another node; and a stale one of its own (a socket gone while the
	// agent was down).
	manual := plugin("client1", "manual", "m1")
	other := hostPlugin("ebs", "o1")
	other.NodeID = "client2"
	stale := hostPlugin("ebs", "s1")
	stale.NodeID = "client1"
	for _, p := range []*api.PluginInfo{manual, other, stale} {
		if _, err := srv.Register(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// Before the source is ready, nothing is removed.
	if err := h.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if get("ebs", "s1") == nil {
		t.Fatal("anti-entropy removed an instance before the sources were ready")
	}
	h.Ready(api.SourceKubelet)

	c.Eventually(20*time.Second, "the stale instance to be removed", func() bool { return get("ebs", "s1") == nil })
	if get("manual", "m1") == nil || get("ebs", "o1") == nil {
		t.Fatal("anti-entropy removed an instance that is not the host's")
	}
	if got := get("ebs", "a1"); got == nil || got.ModifyIndex != first.ModifyIndex {
		t.Fatalf("an unchanged registration was rewritten: %+v, first at %d", got, first.ModifyIndex)
	}
	// The node was reaped (as after a long partition): the next round
	// registers the host's plugins again, and only them.
	if _, err := srv.DeregisterNode(ctx, "client1"); err != nil {
		t.Fatal(err)
	}
	h.Resync()
	c.Eventually(20*time.Second, "the host's plugin to be registered again", func() bool { return get("ebs", "a1") != nil })
	if get("manual", "m1") != nil {
		t.Fatal("anti-entropy registered what the host never had")
	}
	// Deregistering an instance another host has taken over changes
	// nothing: the conditional deregister refuses, and that is success.
	if err := h.Deregister(ctx, other); err != nil {
		t.Fatalf("deregister of another host's instance: %v", err)
	}
	if get("ebs", "o1") == nil {
		t.Fatal("a host removed another host's instance")
	}
	// A round's counts are added once it ends, just after its writes.
	c.Eventually(10*time.Second, "anti-entropy's counts: 1 registered (after the reap), 1 deregistered (the stale one)", func() bool {
		st := h.Stats()
		return st.Registered == 1 && st.Deregistered == 1
	})
}

// A registration made while the cluster cannot take writes is made by
// anti-entropy once it can.
func TestHostRegistersAfterAnOutage(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h, stop := startHost(t, cn.Client, time.Hour)
	defer stop()
	h.Ready(api.SourceKubelet)
	leader := c.Leader()
	for i, n := range c.Nodes { // no quorum
		if n != leader {
			c.Kill(i)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	err := h.Register(wctx, hostPlugin("ebs", "a1"))
	wcancel()
	if err == nil {
		t.Fatal("a write without quorum succeeded")
	}
	for i, n := range c.Nodes {
		if n != leader {
			c.Restart(i)
		}
	}
	c.Eventually(60*time.Second, "anti-entropy to make the registration", func() bool {
		res, err := c.Leader().Backend().Query(ctx, api.Query{Kind: api.QueryList, Type: "csi"})
		return err == nil && len(res.Plugins) == 1 && res.Plugins[0].NodeID == "client1"
	})
}

// When the servers come back into view (a partition healed), the host
// makes a round at once, not at its next interval: a node reaped while it
// was cut off has its plugins back within seconds.
func TestHostSyncsWhenServersComeBack(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var live atomic.Int32
	live.Store(3)
	h, err := agent.NewHost(agent.HostConfig{Backend: cn.Client, Sources: []string{api.SourceKubelet}, SyncInterval: time.Hour,
		LiveServers: func() int { return int(live.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.Run(rctx) }()
	defer func() { rcancel(); <-done }()
	if err := h.Register(ctx, hostPlugin("ebs", "a1")); err != nil {
		t.Fatal(err)
	}
	h.Ready(api.SourceKubelet)
	srv := c.Leader().Backend()
	present := func() bool {
		res, err := srv.Query(ctx, api.Query{Kind: api.QueryNode, NodeID: "client1"})
		return err == nil && len(res.Plugins) == 1
	}
	c.Eventually(20*time.Second, "the first round", func() bool { return h.Stats().Rounds >= 1 })
	// Cut off: gossip sees no server; meanwhile the leader reaps the node.
	live.Store(0)
	time.Sleep(1500 * time.Millisecond) // the watcher polls every second
	if _, err := srv.DeregisterNode(ctx, "client1"); err != nil {
		t.Fatal(err)
	}
	if present() {
		t.Fatal("still registered after the reap")
	}
	live.Store(3) // healed
	c.Eventually(20*time.Second, "the host's plugin to be back after the servers came back", present)
}

// runHost runs a host over cn's client agent that sees members gossip
// members and live servers, with its schedule's draws fixed by draw.
func runHost(t *testing.T, cn *testcluster.ClientNode, interval time.Duration, members int, live *atomic.Int32, draw func(int64) int64) *agent.Host {
	t.Helper()
	h, err := agent.NewHost(agent.HostConfig{Backend: cn.Client, Sources: []string{api.SourceKubelet}, SyncInterval: interval,
		LiveServers: func() int { return int(live.Load()) }, Members: func() int { return members }})
	if err != nil {
		t.Fatal(err)
	}
	agent.SetHostRand(h, draw)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// The interval between anti-entropy rounds scales with the fleet gossip
// knows (Consul's factor: 8 at 10,000 members, 10 at 50,000), so that the
// servers' reads grow as N/log N: with 100 ms set and every wait drawn at
// its shortest (half the scaled interval), a host of a 10,000-member
// fleet makes at most one round every 400 ms, one of 50,000 every 500 ms
// (a slow machine only makes fewer). Unscaled, it made one every 50 ms.
func TestHostRoundsScaleWithTheFleet(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the server", func() bool { return len(cn.Servers()) == 1 })
	const interval, watch = 100 * time.Millisecond, 3 * time.Second
	for _, tc := range []struct {
		members   int
		maxRounds int
	}{
		{10_000, int(watch / (8 * interval / 2))},
		{50_000, int(watch / (10 * interval / 2))},
	} {
		t.Run(fmt.Sprintf("%d members", tc.members), func(t *testing.T) {
			var live atomic.Int32
			live.Store(1)
			h := runHost(t, cn, interval, tc.members, &live, func(int64) int64 { return 0 })
			time.Sleep(watch)
			if got := h.Stats().Rounds; got > tc.maxRounds {
				t.Fatalf("%d rounds in %v among %d members, want at most %d (the interval scaled)", got, watch, tc.members, tc.maxRounds)
			}
		})
	}
}

// The round after servers come back is spread over a random delay of up
// to a second per 200 members: in a small fleet it comes at once; in a
// fleet of 50,000 a host whose draw is the longest waits (up to 250 s,
// here past the test), and one whose draw is the shortest goes at once.
// Without the spread every host of the fleet read in the same second.
func TestHostSpreadsTheRoundAfterServersComeBack(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the server", func() bool { return len(cn.Servers()) == 1 })
	lowest := func(int64) int64 { return 0 }
	highest := func(n int64) int64 { return n - 1 }
	for _, tc := range []struct {
		name    string
		members int
		draw    func(int64) int64
		round   bool // within a few seconds of the servers' return
	}{
		{"3 members, longest draw", 3, highest, true},
		{"50,000 members, shortest draw", 50_000, lowest, true},
		{"50,000 members, longest draw", 50_000, highest, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var live atomic.Int32 // no server seen at start
			h := runHost(t, cn, time.Hour, tc.members, &live, tc.draw)
			time.Sleep(1200 * time.Millisecond) // the watcher's first poll saw none
			live.Store(1)
			deadline := time.Now().Add(4 * time.Second)
			for time.Now().Before(deadline) && h.Stats().Rounds == 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if got := h.Stats().Rounds > 0; got != tc.round {
				t.Fatalf("a round within 4 s of the servers' return: %v, want %v", got, tc.round)
			}
		})
	}
}
