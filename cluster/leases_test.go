package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// Leases, end to end: registrations with a TTL made and renewed over HTTP
// with the Go client, expiries seen on every node's event stream. TTLs are
// a few seconds and every wait is generous: these tests assert what
// happened (events, entries, counts), never how fast.

func leased(name, alloc string, ttl time.Duration) *api.PluginInfo {
	p := plugin(name, alloc)
	p.TTL = api.Duration(ttl)
	return p
}

// events collects one node's event stream (client.Watch on that node
// alone) from an index on; its goroutine ends with the test.
type events struct {
	mu  sync.Mutex
	evs []*api.Event
}

func watchNode(t *testing.T, url string, from uint64) *events {
	t.Helper()
	cl, err := client.New(client.Config{Addrs: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &events{}
	done := make(chan struct{})
	ch := cl.Stream(ctx, from, client.WatchOptions{}).Events()
	go func() {
		defer close(done)
		for ev := range ch {
			e.mu.Lock()
			e.evs = append(e.evs, ev)
			e.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// of returns the events of type typ for alloc (every alloc when "").
func (e *events) of(typ api.EventType, alloc string) []*api.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*api.Event
	for _, ev := range e.evs {
		if ev.EventType == typ && (alloc == "" || ev.Info != nil && ev.Info.AllocID == alloc) {
			out = append(out, ev)
		}
	}
	return out
}

// keepAlive runs cl.KeepAlive for alloc until the returned stop (or the
// test's end), which reports what KeepAlive returned.
func keepAlive(t *testing.T, cl *client.Client, alloc string) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.KeepAlive(ctx, "csi", "ebs", alloc, 0) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// appliedIndex is the highest index any node has applied.
func appliedIndex(c *testcluster.Cluster) uint64 {
	var most uint64
	for _, n := range c.Running() {
		most = max(most, n.AppliedIndex())
	}
	return most
}

func clientOf(t *testing.T, urls ...string) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Addrs: urls})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func urlsOf(nodes []*testcluster.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.HTTPURL)
	}
	return out
}

// A leased registration nobody renews expires: not before its TTL, then
// gone from every node, with one "expired" event at one index on every
// node's stream (and no "deregistered"). A registration without a TTL
// beside it stays.
func TestUnrenewedLeaseExpiresEverywhere(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	cl := clientOf(t, urlsOf(c.Nodes)...)
	_, meta, err := cl.Types(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var streams []*events
	for _, n := range c.Nodes {
		streams = append(streams, watchNode(t, n.HTTPURL, meta.Index))
	}
	const ttl = 2 * time.Second
	if _, err := cl.Register(ctx, plugin("ebs", "plain")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	reg, err := cl.Register(ctx, leased("ebs", "a1", ttl))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := cl.Get(ctx, "csi", "ebs", "a1", nil); err != nil || time.Duration(got.TTL) != ttl {
		t.Fatalf("read back: %+v %v", got, err)
	}
	c.Eventually(60*time.Second, "a1 gone from every node", func() bool {
		for _, n := range c.Nodes {
			if n.State().Instance("csi", "ebs", "a1") != nil {
				return false
			}
		}
		return true
	})
	if gone := time.Since(start); gone < ttl {
		t.Fatalf("expired %v after its registration, before its TTL of %v", gone, ttl)
	}
	var index uint64
	for i, s := range streams {
		c.Eventually(30*time.Second, fmt.Sprintf("node %d's expired event", i), func() bool { return len(s.of(api.EventExpired, "a1")) > 0 })
		exp := s.of(api.EventExpired, "a1")
		if len(exp) != 1 || exp[0].Index <= reg.Index || exp[0].Info.ModifyIndex != reg.Index || time.Duration(exp[0].Info.TTL) != ttl {
			t.Fatalf("node %d: expired events %+v", i, exp)
		}
		if index == 0 {
			index = exp[0].Index
		} else if exp[0].Index != index {
			t.Fatalf("node %d: expired at %d, another node at %d", i, exp[0].Index, index)
		}
		if exp[0].Current == nil || exp[0].Current.AllocID != "plain" {
			t.Fatalf("node %d: the newest left after the expiry is %+v, want plain", i, exp[0].Current)
		}
		if d := s.of(api.EventDeregistered, ""); len(d) != 0 {
			t.Fatalf("node %d: deregistered events %+v", i, d)
		}
	}
	for _, n := range c.Nodes {
		if n.State().Instance("csi", "ebs", "plain") == nil {
			t.Fatalf("%s lost the registration without a TTL", n.NodeID())
		}
	}
	if _, err := cl.Renew(ctx, "csi", "ebs", "a1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("renewal of the expired lease: %v, want not found", err)
	}
}

// A leased registration whose holder renews it (client.KeepAlive, every
// third of its TTL) outlives its TTL several times over; renewals reach
// the leader through any server and through a client agent; a renewal of
// an instance without a lease is a 404, and no renewal is a log entry.
func TestRenewedLeaseStays(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	agent := c.AddClient(nil)
	ctx := ctxT(t)
	cl := clientOf(t, urlsOf(c.Nodes)...)
	const ttl = 3 * time.Second
	if _, err := cl.Register(ctx, plugin("ebs", "plain")); err != nil {
		t.Fatal(err)
	}
	reg, err := cl.Register(ctx, leased("ebs", "a1", ttl))
	if err != nil {
		t.Fatal(err)
	}
	stream := watchNode(t, c.Followers()[0].HTTPURL, reg.Index)

	stop := keepAlive(t, cl, "a1")

	// Through each server and the client agent, one at a time.
	applied := appliedIndex(c)
	for _, url := range append(urlsOf(c.Nodes), agent.HTTPURL) {
		res, err := clientOf(t, url).Renew(ctx, "csi", "ebs", "a1")
		if err != nil || time.Duration(res.TTL) != ttl {
			t.Fatalf("renew through %s: %+v %v", url, res, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if now := appliedIndex(c); now != applied {
		t.Fatalf("renewals moved the applied index from %d to %d: they are not log entries", applied, now)
	}
	for _, tc := range []struct {
		alloc string
		want  error
	}{{"plain", api.ErrNotFound}, {"nope", api.ErrNotFound}} {
		if _, err := clientOf(t, agent.HTTPURL).Renew(ctx, "csi", "ebs", tc.alloc); !errors.Is(err, tc.want) {
			t.Fatalf("renew %s through the client agent: %v, want %v", tc.alloc, err, tc.want)
		}
	}

	time.Sleep(3 * ttl)
	if err := stop(); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	if exp := stream.of(api.EventExpired, ""); len(exp) != 0 {
		t.Fatalf("a renewed lease expired: %+v", exp)
	}
	for _, n := range c.Nodes {
		if n.State().Instance("csi", "ebs", "a1") == nil {
			t.Fatalf("%s lost the renewed registration", n.NodeID())
		}
	}
	// Once its holder stops, it goes like any other.
	c.Eventually(60*time.Second, "a1 to expire once no longer renewed", func() bool { return len(stream.of(api.EventExpired, "a1")) == 1 })
}

// A registration with a TTL again resets its deadline, even one that
// changes nothing (and so is no event for the leader's lessor to see).
func TestReRegistrationResetsTheDeadline(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	cl := clientOf(t, c.Followers()[0].HTTPURL) // through a follower: the reset crosses to the leader
	const ttl = 2 * time.Second
	p := leased("ebs", "a1", ttl)
	first, err := cl.Register(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	stream := watchNode(t, c.Leader().HTTPURL, first.Index)
	for range 6 { // 6 × ttl/2: three TTLs
		time.Sleep(ttl / 2)
		res, err := cl.Register(ctx, p)
		if err != nil || res.Result != api.ResultUnchanged {
			t.Fatalf("re-registration: %+v %v", res, err)
		}
	}
	if exp := stream.of(api.EventExpired, ""); len(exp) != 0 {
		t.Fatalf("expired while re-registered every half TTL: %+v", exp)
	}
	c.Eventually(60*time.Second, "a1 to expire once no longer re-registered", func() bool { return len(stream.of(api.EventExpired, "a1")) == 1 })
}

// An election expires nothing whose holder keeps renewing: the leader is
// killed while a holder renews through every server, and its lease
// outlives the election and two TTLs after it. The new leader does expire
// what nobody renews.
func TestElectionExpiresNoRenewedLease(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	cl := clientOf(t, urlsOf(c.Nodes)...)
	const ttl = 3 * time.Second
	held, err := cl.Register(ctx, leased("ebs", "held", ttl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Register(ctx, leased("ebs", "orphan", ttl)); err != nil {
		t.Fatal(err)
	}
	stop := keepAlive(t, cl, "held")

	old := c.Leader()
	var streams []*events
	for _, f := range c.Followers() {
		streams = append(streams, watchNode(t, f.HTTPURL, held.Index))
	}
	time.Sleep(ttl / 3)
	c.Kill(indexOf(c, old))
	leader := c.WaitForLeader()
	t.Logf("leader %s killed, %s elected", old.NodeID(), leader.NodeID())

	c.Eventually(60*time.Second, "the orphan to expire under the new leader", func() bool {
		for _, s := range streams {
			if len(s.of(api.EventExpired, "orphan")) != 1 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * ttl)
	for i, s := range streams {
		if exp := s.of(api.EventExpired, "held"); len(exp) != 0 {
			t.Fatalf("stream %d: the renewed lease expired across the election: %+v", i, exp)
		}
	}
	for _, n := range c.Running() {
		if n.State().Instance("csi", "ebs", "held") == nil {
			t.Fatalf("%s lost the renewed registration", n.NodeID())
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
}

// The expiry rate bound spaces a mass expiry: at 20 a second (and a tick
// of 100 ms), 30 leases that run out together leave the log as entries of
// at most 2 expiries each, 15 or more of them, on every node alike.
func TestExpiryRateSpacesAMassExpiry(t *testing.T) {
	const rate, perEntry, n = 20, 2, 30
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) { cfg.LeaseExpiryRate = rate }})
	ctx := ctxT(t)
	cl := clientOf(t, urlsOf(c.Nodes)...)
	_, meta, err := cl.Types(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	stream := watchNode(t, c.Followers()[0].HTTPURL, meta.Index)
	for i := range n {
		if _, err := cl.Register(ctx, leased("ebs", fmt.Sprint("a", i), time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	c.Eventually(120*time.Second, "every lease to expire", func() bool { return len(stream.of(api.EventExpired, "")) == n })
	byIndex := map[uint64]int{}
	for _, ev := range stream.of(api.EventExpired, "") {
		byIndex[ev.Index]++
	}
	for index, k := range byIndex {
		if k > perEntry {
			t.Fatalf("entry %d expired %d instances, at most %d", index, k, perEntry)
		}
	}
	if len(byIndex) < n/perEntry {
		t.Fatalf("%d expiry entries for %d instances, at least %d", len(byIndex), n, n/perEntry)
	}
	// The leaders' own counts (an entry whose outcome a deposed leader
	// never learned is in the stream, not in its counts).
	var entries, expired uint64
	for _, node := range c.Nodes {
		st := node.LeaseStats()
		entries += st.ExpiryEntries
		expired += st.Expired
	}
	if expired > n || expired > entries*perEntry {
		t.Fatalf("the leaders count %d entries expiring %d; the stream saw %d entries expiring %d", entries, expired, len(byIndex), n)
	}
}

// A TTL outside 1s..24h is refused at the edge with a 400 that names it;
// nothing reaches the log.
func TestTTLValidatedAtTheEdge(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	cl := clientOf(t, c.Followers()[0].HTTPURL)
	before := appliedIndex(c)
	for _, ttl := range []time.Duration{500 * time.Millisecond, 25 * time.Hour, -time.Second} {
		_, err := cl.Register(ctx, leased("ebs", "a1", ttl))
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Message, "TTL") {
			t.Fatalf("TTL %v: %v, want a 400 naming the TTL", ttl, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if now := appliedIndex(c); now != before {
		t.Fatalf("refused registrations moved the applied index from %d to %d", before, now)
	}
}

// An expiry goes through the proposing server's own Raft, never forwarded
// to the leader: a server that no longer leads (a deposed leader whose
// lessor ran on, etcd's issue 12528) cannot end a lease the new leader
// has given its grace. Proposed on each follower it fails and changes
// nothing; on the leader it expires the instance.
func TestExpiryIsNeverForwarded(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	cl := clientOf(t, urlsOf(c.Nodes)...)
	reg, err := cl.Register(ctx, leased("ebs", "a1", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	batch := []fsm.ExpiredLease{{Type: "csi", Name: "ebs", AllocID: "a1", ModifyIndex: reg.Index}}
	for _, f := range c.Followers() {
		if err := f.ProposeExpiry(ctx, batch); err == nil {
			t.Fatalf("%s, a follower, proposed an expiry", f.NodeID())
		}
	}
	// A write after them, applied everywhere: had a follower's expiry
	// been forwarded, it would be in the log before this one.
	after, err := cl.Register(ctx, plugin("ebs", "after"))
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually(30*time.Second, "every node at the write after", func() bool {
		for _, n := range c.Nodes {
			if n.State().Index() < after.Index {
				return false
			}
		}
		return true
	})
	for _, n := range c.Nodes {
		if n.State().Instance("csi", "ebs", "a1") == nil {
			t.Fatalf("%s: a follower's expiry removed the lease", n.NodeID())
		}
	}
	if err := c.Leader().ProposeExpiry(ctx, batch); err != nil {
		t.Fatalf("the leader's expiry: %v", err)
	}
	if c.Leader().State().Instance("csi", "ebs", "a1") != nil {
		t.Fatal("the leader's expiry left the instance")
	}
}

// A leader cut off from the others acknowledges no renewal, even before
// it notices it lost its quorum: the new leader, elected on the other
// side, never sees such a renewal and counts the lease from its own
// start, so the holder would be told of a deadline nobody keeps (the
// fault suite's pause-leader found it). Renewals are tried on the cut-off
// leader for as long as it still says it leads.
func TestCutOffLeaderAcknowledgesNoRenewal(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	cl := clientOf(t, urlsOf(c.Nodes)...)
	if _, err := cl.Register(ctx, leased("ebs", "a1", time.Hour)); err != nil {
		t.Fatal(err)
	}
	leader := c.Leader()
	li := -1
	for i, n := range c.Nodes {
		if n == leader {
			li = i
		}
	}
	if _, err := leader.Renew(ctx, api.RenewRequest{Type: "csi", Name: "ebs", AllocID: "a1"}); err != nil {
		t.Fatalf("a renewal on the leader before the cut: %v", err)
	}
	c.Partition(li)
	tries := 0
	for leader.IsLeader() {
		tries++
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := leader.Renew(rctx, api.RenewRequest{Type: "csi", Name: "ebs", AllocID: "a1"})
		cancel()
		if err == nil {
			t.Fatalf("renewal %d: the cut-off leader acknowledged it", tries)
		}
	}
	t.Logf("%d renewals refused by the cut-off leader before it stepped down", tries)
	c.Heal()
}
