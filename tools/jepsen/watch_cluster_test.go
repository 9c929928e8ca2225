package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// The cluster's last applied entry may change no plugin (here an unchanged
// re-registration; in a run also a new leader's no-op or a configuration
// change): the slow watcher must still be seen to reach it, from the
// stream's heartbeats, or every run that ends on such an entry reports a
// watcher that fell behind (CI seed 3826: "reached index 3845, but every
// node had applied 3846"). Seen failing with the watcher's heartbeats off.
func TestSlowWatcherReachesAnEntryWithoutAnEvent(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	n := c.Leader()
	p := &api.PluginInfo{Type: "t0", Name: "n0", AllocID: "a0", Version: "v1", NodeID: "node-1", ConnectionInfo: &api.ConnectionInfo{Address: "127.0.0.1:9"}}
	first := c.Register(n, p)
	c.Register(n, p) // unchanged: an entry, no event
	target := n.AppliedIndex()
	if target <= first.Index {
		t.Fatalf("the unchanged re-registration made no entry (applied %d, first write %d): the test needs an entry without an event", target, first.Index)
	}

	host, _, _ := net.SplitHostPort(n.HTTPURL[len("http://"):])
	d := &db{hosts: []*node{{Name: "n1", IP: host, HTTP: n.HTTPURL[len("http://"):]}}}
	rec := &recorder{}
	w := newSlowWatcher(d, rec, func() int64 { return time.Now().UnixNano() }, 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	defer func() { cancel(); <-done }()

	if reached, ok := w.catchUp(target, 20*time.Second); !ok {
		t.Fatalf("the slow watcher reached index %d of %d (its last event is at %d)", reached, target, first.Index)
	}
}
