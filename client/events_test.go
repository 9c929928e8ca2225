package client_test

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// ackedWrite is a write the cluster acknowledged, with what it should have
// emitted.
type ackedWrite struct {
	index  uint64
	result api.Result
	key    string // type/name/alloc, or node:ID
}

// render describes an event for comparing streams.
func render(ev *api.Event) string {
	cur := "-"
	if ev.Current != nil {
		cur = ev.Current.AllocID
	}
	return fmt.Sprintf("%d %s %s/%s/%s v=%s cur=%s", ev.Index, ev.EventType, ev.Info.Type, ev.Info.Name, ev.Info.AllocID, ev.Info.Version, cur)
}

// Concurrent clients on all nodes make registrations, updates and
// deregistrations; a subscriber on each node records its stream. The three
// sequences are identical, indexes never decrease (equal only within one
// entry), every acknowledged change appears exactly once at its index, and
// nothing appears for rejected or no-op writes.
func TestEventStreamsAgreeAcrossNodes(t *testing.T) {
	const (
		writers = 6
		perW    = 10000 / writers
	)
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// One subscriber per node, each pinned to its node.
	streams := make([][]*api.Event, len(c.Nodes))
	var subWG sync.WaitGroup
	subCtx, stopSubs := context.WithCancel(ctx)
	for i, n := range c.Nodes {
		wc, _ := client.New(client.Config{Addrs: []string{n.HTTPURL}})
		ch := wc.Watch(subCtx, 0, client.WatchOptions{Heartbeats: true})
		subWG.Add(1)
		go func(i int) {
			defer subWG.Done()
			for ev := range ch {
				streams[i] = append(streams[i], ev)
			}
		}(i)
	}

	var (
		mu    sync.Mutex
		acked []ackedWrite
	)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			cl := newClient(t, c, w%3)
			for i := 0; i < perW; i++ {
				name := fmt.Sprintf("n%d", rng.Intn(40))
				alloc := fmt.Sprintf("w%d-a%d", w, rng.Intn(5))
				p := &api.PluginInfo{Type: fmt.Sprintf("t%d", rng.Intn(3)), Name: name, AllocID: alloc,
					NodeID: fmt.Sprintf("host%d", rng.Intn(4)), Version: fmt.Sprint(rng.Intn(3)),
					ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}
				var (
					res api.WriteResult
					err error
					key string
				)
				switch x := rng.Intn(100); {
				case x < 60:
					res, err = cl.Register(ctx, p)
					key = p.Type + "/" + p.Name + "/" + p.AllocID
				case x < 95:
					res, err = cl.Deregister(ctx, p.Type, p.Name, p.AllocID)
					key = p.Type + "/" + p.Name + "/" + p.AllocID
				case x < 97:
					res, err = cl.DeregisterNode(ctx, p.NodeID)
					key = "node:" + p.NodeID
				default: // rejected at the edge: must leave no trace
					p.Name = ""
					if _, err := cl.Register(ctx, p); err == nil {
						t.Errorf("an invalid write was accepted")
					}
					continue
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				mu.Lock()
				acked = append(acked, ackedWrite{index: res.Index, result: res.Result, key: key})
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Wait until each stream has caught up with the last write.
	var last uint64
	for _, a := range acked {
		last = max(last, a.index)
	}
	c.Eventually(60*time.Second, "every subscriber to reach the last write", func() bool {
		for _, n := range c.Nodes {
			if n.AppliedIndex() < last {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // three heartbeats: every stream has flushed past last
	stopSubs()
	subWG.Wait()

	changes := make([][]string, len(streams))
	for i, s := range streams {
		var prev uint64
		prevWasHeartbeat := false
		for _, ev := range s {
			switch ev.EventType {
			case api.EventReset:
				t.Fatalf("node %d: reset at %d: the journal covers this run", i, ev.Index)
			case api.EventHeartbeat:
				if ev.Index < prev {
					t.Fatalf("node %d: heartbeat at %d after an event at %d", i, ev.Index, prev)
				}
				prev, prevWasHeartbeat = ev.Index, true
				continue
			}
			if ev.Index < prev || (prevWasHeartbeat && ev.Index == prev) {
				t.Fatalf("node %d: event at %d after %d", i, ev.Index, prev)
			}
			prev, prevWasHeartbeat = ev.Index, false
			changes[i] = append(changes[i], render(ev))
		}
	}
	for i := 1; i < len(changes); i++ {
		if strings.Join(changes[i], "\n") != strings.Join(changes[0], "\n") {
			t.Fatalf("node %d's stream differs from node 0's (%d vs %d events)", i, len(changes[i]), len(changes[0]))
		}
	}

	// Every acknowledged change appears exactly once, at its index, and
	// nothing else appears.
	byIndex := map[uint64][]*api.Event{}
	for _, ev := range streams[0] {
		if ev.EventType != api.EventHeartbeat {
			byIndex[ev.Index] = append(byIndex[ev.Index], ev)
		}
	}
	seen := map[uint64]bool{}
	emitting := 0
	for _, a := range acked {
		evs := byIndex[a.index]
		if seen[a.index] {
			t.Fatalf("two acknowledged writes at index %d", a.index)
		}
		seen[a.index] = true
		switch a.result {
		case api.ResultUnchanged, api.ResultAbsent:
			if len(evs) != 0 {
				t.Fatalf("%s (%s) at %d emitted %d events", a.key, a.result, a.index, len(evs))
			}
			continue
		}
		emitting++
		if strings.HasPrefix(a.key, "node:") {
			for _, ev := range evs {
				if ev.EventType != api.EventDeregistered || "node:"+ev.Info.NodeID != a.key {
					t.Fatalf("deregister %s at %d emitted %s", a.key, a.index, render(ev))
				}
			}
			if len(evs) == 0 {
				t.Fatalf("deregister %s (%s) emitted nothing", a.key, a.result)
			}
			continue
		}
		if len(evs) != 1 || string(evs[0].EventType) != string(a.result) ||
			evs[0].Info.Type+"/"+evs[0].Info.Name+"/"+evs[0].Info.AllocID != a.key {
			t.Fatalf("write %s (%s) at %d: events %d", a.key, a.result, a.index, len(evs))
		}
	}
	for idx := range byIndex {
		if !seen[idx] {
			t.Fatalf("events at %d match no acknowledged write", idx)
		}
	}
	if emitting < 1000 {
		t.Fatalf("only %d of %d writes changed anything: the workload is too weak", emitting, len(acked))
	}
	t.Logf("%d writes, %d changed state, %d events per node", len(acked), emitting, len(changes[0]))
}

// A subscriber that falls off the journal gets exactly one reset, carrying
// exactly the state at the reset's index, and then every later event.
func TestFallenSubscriberGetsOneExactReset(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(i int, cfg *cluster.Config) {
		cfg.JournalSize = 64
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := c.Followers()[0]
	// The reference: a subscriber that reads everything from the start.
	ref, err := n.Hub().Watch(ctx, registry.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The laggard: its channel holds 64 events and it does not read.
	lag, err := n.Hub().Watch(ctx, registry.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var refEvents []*api.Event
	refDone := make(chan struct{})
	var lastIdx uint64
	cl := newClient(t, c, 0)
	for i := 0; i < 600; i++ {
		p := plugin(fmt.Sprintf("p%d", i%50), fmt.Sprintf("a%d", i%7))
		var res api.WriteResult
		if i%3 == 2 {
			res, err = cl.Deregister(ctx, p.Type, p.Name, p.AllocID)
		} else {
			res, err = cl.Register(ctx, p)
		}
		if err != nil {
			t.Fatal(err)
		}
		lastIdx = res.Index
		for len(ref) > 0 { // keep the reference reader current
			refEvents = append(refEvents, <-ref)
		}
	}
	go func() {
		defer close(refDone)
		for ev := range ref {
			refEvents = append(refEvents, ev)
			if ev.Index >= lastIdx {
				return
			}
		}
	}()
	c.Eventually(20*time.Second, "the follower to apply everything", func() bool { return n.AppliedIndex() >= lastIdx })

	var lagEvents []*api.Event
	resets := 0
	deadline := time.After(20 * time.Second)
	for len(lagEvents) == 0 || lagEvents[len(lagEvents)-1].Index < lastIdx {
		select {
		case ev := <-lag:
			if ev.EventType == api.EventReset {
				resets++
			}
			lagEvents = append(lagEvents, ev)
		case <-deadline:
			t.Fatalf("laggard stuck at %d of %d", lagEvents[len(lagEvents)-1].Index, lastIdx)
		}
	}
	<-refDone
	if resets != 1 {
		t.Fatalf("laggard got %d resets, want exactly 1", resets)
	}
	// The state at the reset's index, replayed from the reference stream.
	var reset *api.Event
	for _, ev := range lagEvents {
		if ev.EventType == api.EventReset {
			reset = ev
		}
	}
	state := map[string]string{}
	for _, ev := range refEvents {
		if ev.Index > reset.Index {
			break
		}
		k := ev.Info.Type + "/" + ev.Info.Name + "/" + ev.Info.AllocID
		if ev.EventType == api.EventDeregistered {
			delete(state, k)
		} else {
			state[k] = fmt.Sprint(ev.Info.ModifyIndex)
		}
	}
	var want, got []string
	for k, v := range state {
		want = append(want, k+"@"+v)
	}
	for _, p := range reset.Plugins {
		got = append(got, fmt.Sprintf("%s/%s/%s@%d", p.Type, p.Name, p.AllocID, p.ModifyIndex))
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(want, " ") != strings.Join(got, " ") {
		t.Fatalf("reset at %d carries %d instances; the replayed state has %d", reset.Index, len(got), len(want))
	}
	// After the reset: exactly the reference's events past its index.
	var after, refAfter []string
	seenReset := false
	for _, ev := range lagEvents {
		if seenReset {
			after = append(after, fmt.Sprintf("%d %s %s", ev.Index, ev.EventType, ev.Info.AllocID))
		}
		seenReset = seenReset || ev.EventType == api.EventReset
	}
	for _, ev := range refEvents {
		if ev.Index > reset.Index {
			refAfter = append(refAfter, fmt.Sprintf("%d %s %s", ev.Index, ev.EventType, ev.Info.AllocID))
		}
	}
	if strings.Join(after, "\n") != strings.Join(refAfter, "\n") {
		t.Fatalf("after the reset: %d events, reference has %d", len(after), len(refAfter))
	}
}

// The protobuf stream and the JSON stream deliver the same events, field
// for field: a reset (one with plugins and one that is empty), registrations
// with options and either kind of endpoint, updates and deregistrations.
func TestWatchEncodingsAgree(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Modify: func(i int, cfg *cluster.Config) {
		cfg.JournalSize = 16 // index 0 is gone after the first writes: a reset
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := newClient(t, c, 0)
	write := func(i int) uint64 {
		p := plugin(fmt.Sprintf("p%d", i%5), fmt.Sprintf("a%d", i%3))
		p.Version = fmt.Sprint(i)
		if i%2 == 0 {
			p.ConnectionInfo = &api.ConnectionInfo{Address: fmt.Sprintf("10.0.0.%d:9", i)}
			p.Options = map[string]string{"k": fmt.Sprint(i), "zone": "a"}
		}
		var res api.WriteResult
		var err error
		if i%4 == 3 {
			res, err = cl.Deregister(ctx, p.Type, p.Name, p.AllocID)
		} else {
			res, err = cl.Register(ctx, p)
		}
		if err != nil {
			t.Fatal(err)
		}
		return res.Index
	}
	for i := 0; i < 40; i++ {
		write(i)
	}
	watch := func(ctx context.Context, json bool, types []string) <-chan *api.Event {
		wc, err := client.New(client.Config{Addrs: []string{c.Nodes[0].HTTPURL}})
		if err != nil {
			t.Fatal(err)
		}
		return wc.Watch(ctx, 0, client.WatchOptions{JSON: json, Types: types})
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	streams := map[string]<-chan *api.Event{
		"json":           watch(wctx, true, nil),
		"protobuf":       watch(wctx, false, nil),
		"json empty":     watch(wctx, true, []string{"none"}),
		"protobuf empty": watch(wctx, false, []string{"none"}),
	}
	// Each stream's reset first: it is taken when the stream connects, so
	// a write between two connects would give them different resets.
	first := map[string]*api.Event{}
	for name, ch := range streams {
		select {
		case ev := <-ch:
			first[name] = ev
		case <-ctx.Done():
			t.Fatalf("%s: no reset", name)
		}
	}
	// Live events after the reset.
	var last uint64
	for i := 40; i < 60; i++ {
		last = write(i)
	}
	collect := func(ch <-chan *api.Event, until uint64) []*api.Event {
		evs := []*api.Event{}
		for ev := range ch {
			evs = append(evs, ev)
			if ev.Index >= until {
				return evs
			}
		}
		t.Fatalf("stream ended before index %d", until)
		return nil
	}
	got := append([]*api.Event{first["json"]}, collect(streams["json"], last)...)
	want := append([]*api.Event{first["protobuf"]}, collect(streams["protobuf"], last)...)
	if got[0].EventType != api.EventReset || len(got[0].Plugins) == 0 {
		t.Fatalf("first event %+v: want a reset with plugins", got[0])
	}
	if len(got) != len(want) {
		t.Fatalf("json %d events, protobuf %d", len(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("event %d:\njson     %+v\nprotobuf %+v", i, got[i], want[i])
		}
	}
	// An empty reset is a statement, "nothing exists", in both encodings.
	ej, ep := first["json empty"], first["protobuf empty"]
	if !reflect.DeepEqual(ej, ep) || ej.EventType != api.EventReset || ej.Plugins == nil || len(ej.Plugins) != 0 {
		t.Fatalf("empty reset: json %+v, protobuf %+v", ej, ep)
	}
}

// A watcher whose position is past everything the cluster committed (the
// cluster was restored from a backup, or rebuilt, behind it) gets a reset
// with the cluster's state, through a follower too, and then the events
// after it. Before, the stream skipped in silence every event up to the
// old position.
func TestWatchPastTheClusterGetsAReset(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.New(client.Config{Addrs: []string{c.Followers()[0].HTTPURL}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.Register(ctx, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a1", NodeID: "n1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}})
	if err != nil {
		t.Fatal(err)
	}
	ahead := res.Index + 1000 // what the watcher saw of the old history
	ch := cl.Watch(ctx, ahead, client.WatchOptions{})
	next := func(what string) *api.Event {
		select {
		case ev := <-ch:
			return ev
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: nothing came", what)
		}
		return nil
	}
	reset := next("the reset")
	if reset.EventType != api.EventReset || reset.Index < res.Index || reset.Index >= ahead || len(reset.Plugins) != 1 || reset.Plugins[0].AllocID != "a1" {
		t.Fatalf("first event: %+v, want a reset at the cluster's index with a1", reset)
	}
	if _, err := cl.Register(ctx, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a2", NodeID: "n1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}); err != nil {
		t.Fatal(err)
	}
	if ev := next("the next write"); ev.EventType != api.EventRegistered || ev.Info.AllocID != "a2" {
		t.Fatalf("after the reset: %+v, want a2 registered", ev)
	}
}
