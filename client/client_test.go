package client_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

func plugin(name, alloc string) *api.PluginInfo {
	return &api.PluginInfo{Type: "csi", Name: name, AllocID: alloc, NodeID: "n1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"}}
}

func newClient(t *testing.T, c *testcluster.Cluster, first int) *client.Client {
	var addrs []string
	for i := range c.Nodes {
		addrs = append(addrs, c.Nodes[(first+i)%len(c.Nodes)].HTTPURL)
	}
	cl, err := client.New(client.Config{Addrs: addrs, RetryWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestClient(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	cl := newClient(t, c, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := cl.Register(ctx, plugin("ebs", "a1"))
	if err != nil || res.Result != "registered" {
		t.Fatalf("register: %+v %v", res, err)
	}
	if _, err := cl.Register(ctx, plugin("", "a1")); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("invalid register: %v", err)
	}
	if _, _, err := cl.Get(ctx, "csi", "ebs", "zz", nil); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("get absent: %v", err)
	}
	list, meta, err := cl.List(ctx, "csi", nil)
	if err != nil || len(list) != 1 || meta.Index < res.Index || !meta.KnownLeader {
		t.Fatalf("list: %v %+v %v", list, meta, err)
	}

	// The first node dies: the client moves on, and reads still see the
	// acknowledged write.
	c.Kill(0)
	res2, err := cl.Register(ctx, plugin("ebs", "a2"))
	if err != nil {
		t.Fatalf("register after the first node died: %v", err)
	}
	inst, _, err := cl.Instances(ctx, "csi", "ebs", nil)
	if err != nil || len(inst) != 2 || inst[0].AllocID != "a2" || inst[0].ModifyIndex != res2.Index {
		t.Fatalf("instances after failover: %v %v", inst, err)
	}
	peers, err := cl.Peers(ctx)
	if err != nil || len(peers) != 3 {
		t.Fatalf("peers: %v %v", peers, err)
	}
}

// A registration sent as protobuf (Config.Protobuf) reads back as the
// same registration sent as JSON, every field of it.
func TestClientRegistersInEitherEncoding(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := func(alloc string) *api.PluginInfo {
		p := plugin("ebs", alloc)
		p.Version, p.Options, p.TTL = "1.2.3", map[string]string{"zone": "a", "rack": "7"}, api.Duration(time.Minute)
		p.ConnectionInfo.Address = "10.0.0.1:9000"
		p.Health = &api.InstanceHealth{Status: api.HealthSuspect, Check: "probe", Reason: "slow", LastSeen: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
		return p
	}
	var got []*api.PluginInfo
	for i, proto := range []bool{false, true} {
		cl, err := client.New(client.Config{Addrs: []string{c.Followers()[0].HTTPURL}, Protobuf: proto})
		if err != nil {
			t.Fatal(err)
		}
		alloc := fmt.Sprint("a", i)
		res, err := cl.Register(ctx, full(alloc))
		if err != nil || res.Result != "registered" {
			t.Fatalf("protobuf %v: register: %+v %v", proto, res, err)
		}
		if _, err := cl.Register(ctx, plugin("", "a1")); !errors.Is(err, api.ErrInvalid) {
			t.Fatalf("protobuf %v: invalid register: %v", proto, err)
		}
		p, _, err := cl.Get(ctx, "csi", "ebs", alloc, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.AllocID, p.CreateIndex, p.ModifyIndex = "", 0, 0
		got = append(got, p)
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Fatalf("JSON registration reads back as %+v\nprotobuf as %+v", got[0], got[1])
	}
}

// A write retried with the same request ID applies once, even when the
// client sends it through different nodes.
func TestClientRetryIsIdempotent(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = client.WithRequestID(ctx, "retry-1")
	var first api.WriteResult
	for i := range c.Nodes {
		res, err := newClient(t, c, i).Deregister(ctx, "csi", "x", "y")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res
			if _, err := newClient(t, c, 0).Register(context.Background(), plugin("x", "y")); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if res != first {
			t.Fatalf("retry through node %d answered %+v, want the original %+v", i, res, first)
		}
	}
}

// A watcher whose node dies resumes on another node with no gap and no
// duplicate, while writes go on through the other nodes.
func TestWatchAcrossFailover(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	watchNode := 0
	for i, n := range c.Nodes {
		if !n.IsLeader() {
			watchNode = i
		}
	}
	wc, err := client.New(client.Config{Addrs: []string{c.Nodes[watchNode].HTTPURL, c.Nodes[(watchNode+1)%3].HTTPURL, c.Nodes[(watchNode+2)%3].HTTPURL}, RetryWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := wc.Watch(ctx, 0, client.WatchOptions{Types: []string{"csi"}, StallTimeout: 2 * time.Second})

	const writes = 300
	var (
		mu    sync.Mutex
		acked = map[uint64]string{}
	)
	writer := func(cl *client.Client, from, to int) {
		for i := from; i < to; i++ {
			res, err := cl.Register(ctx, plugin(fmt.Sprintf("p%d", i), "a"))
			if err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			mu.Lock()
			acked[res.Index] = fmt.Sprintf("p%d", i)
			mu.Unlock()
		}
	}
	// Writers talk to the two nodes that survive.
	other := newClient(t, c, (watchNode+1)%3)
	var last uint64
	seen := map[string]bool{}
	receive := func(n int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for len(seen) < n {
			select {
			case ev := <-events:
				if ev.EventType == api.EventReset {
					t.Fatalf("reset at %d: the journal should have covered the failover", ev.Index)
				}
				if ev.Index <= last {
					t.Fatalf("event at %d after %d: duplicate or out of order", ev.Index, last)
				}
				last = ev.Index
				mu.Lock()
				name, ok := acked[ev.Index]
				mu.Unlock()
				if !ok || name != ev.Info.Name || seen[name] {
					t.Fatalf("event %s@%d does not match an acknowledged write (%q)", ev.Info.Name, ev.Index, name)
				}
				seen[name] = true
			case <-deadline:
				t.Fatalf("saw %d of %d writes", len(seen), n)
			}
		}
	}
	writer(other, 0, writes/2)
	receive(writes / 2) // delivered by the node about to die
	c.Kill(watchNode)
	writer(other, writes/2, writes)
	receive(writes)
}

// A consumer that reads slowly (far more than the channel's capacity behind
// for longer than the stall timeout) still gets every event exactly once,
// in order: the stall timer measures the server's silence, not the
// consumer's, and the resume point moves only past delivered events.
func TestWatchSlowConsumerLosesNothing(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	wc := newClient(t, c, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const writes = 200
	acked := make([]uint64, 0, writes)
	for i := 0; i < writes; i++ {
		res, err := wc.Register(ctx, plugin(fmt.Sprintf("slow%d", i), "a"))
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		acked = append(acked, res.Index)
	}
	// Everything is already in the journal: the stream can deliver 200
	// events at once, while the consumer pauses for 2.5 stall timeouts
	// after every 16, so the watcher is blocked on it for longer than the
	// stall timeout again and again.
	events := wc.Watch(ctx, 0, client.WatchOptions{Types: []string{"csi"}, StallTimeout: 200 * time.Millisecond})
	var got []uint64
	deadline := time.After(60 * time.Second)
	for len(got) < writes {
		select {
		case ev := <-events:
			if ev.EventType != api.EventRegistered {
				t.Fatalf("unexpected %s event at %d", ev.EventType, ev.Index)
			}
			got = append(got, ev.Index)
			if len(got)%16 == 0 {
				time.Sleep(500 * time.Millisecond)
			}
		case <-deadline:
			t.Fatalf("received %d of %d events", len(got), writes)
		}
	}
	for i := range acked {
		if got[i] != acked[i] {
			t.Fatalf("event %d has index %d, want %d (a gap or a duplicate): got %v", i, got[i], acked[i], got)
		}
	}
}
