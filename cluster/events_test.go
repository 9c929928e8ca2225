package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// collect reads events until one at or past index arrives.
func collect(t *testing.T, ch <-chan *api.Event, index uint64) []*api.Event {
	t.Helper()
	var out []*api.Event
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream closed at %d events", len(out))
			}
			out = append(out, ev)
			if ev.Index >= index {
				return out
			}
		case <-deadline:
			t.Fatalf("no event at %d within 30s (%d events)", index, len(out))
		}
	}
}

// A follower that installs a snapshot tells its subscribers with a reset
// at the snapshot's index: never silence, never an index going back.
func TestSnapshotInstallResetsSubscribers(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(i int, cfg *cluster.Config) {
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 8
		cfg.SnapshotInterval = 100 * time.Millisecond
		// boltdb: it compacts to 8 trailing entries, so the follower
		// must install the snapshot (raft-wal drops only whole 16 MiB
		// segments, and the follower would replay the log instead).
		cfg.LogStore = cluster.LogStoreBolt
	}})
	ctx := ctxT(t)
	f := c.Followers()[0]
	fi := indexOf(c, f)
	sub, err := f.Hub().Watch(ctx, registry.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Leader().Backend().Register(ctx, plugin("before", "a"))
	if err != nil {
		t.Fatal(err)
	}
	collect(t, sub, first.Index)

	leader := c.Leader() // before the partition: WaitForLeader wants every running node to agree
	c.Partition(fi)
	var last uint64
	for i := 0; i < 200; i++ {
		res, err := leader.Backend().Register(ctx, plugin(fmt.Sprintf("p%d", i), "a"))
		if err != nil {
			t.Fatal(err)
		}
		last = res.Index
	}
	if err := leader.Snapshot(); err != nil {
		t.Fatal(err)
	}
	c.Heal()
	evs := collect(t, sub, last)
	var resets int
	prev := first.Index
	for _, ev := range evs {
		if ev.Index < prev {
			t.Fatalf("index went back from %d to %d", prev, ev.Index)
		}
		prev = ev.Index
		if ev.EventType == api.EventReset {
			resets++
			if len(ev.Plugins) < 2 {
				t.Fatalf("reset at %d carries %d plugins", ev.Index, len(ev.Plugins))
			}
		}
	}
	if resets != 1 {
		t.Fatalf("%d resets after the snapshot install, want 1", resets)
	}
}

// A node restarted on its data dir re-applies its log (or restores its
// snapshot); a subscriber resuming there from the index it had reached gets
// nothing it already had.
func TestResumeAfterRestartHasNoDuplicates(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", snapshot), func(t *testing.T) {
			c := testcluster.New(t, 3, testcluster.Options{})
			ctx := ctxT(t)
			f := c.Followers()[0]
			fi := indexOf(c, f)
			var mid uint64
			for i := 0; i < 40; i++ {
				res, err := c.Leader().Backend().Register(ctx, plugin(fmt.Sprintf("p%d", i), "a"))
				if err != nil {
					t.Fatal(err)
				}
				if i == 19 {
					mid = res.Index
				}
			}
			c.Eventually(10*time.Second, "the follower to apply", func() bool { return f.AppliedIndex() >= mid+20 })
			if snapshot {
				if err := f.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			c.Restart(fi)
			f = c.Nodes[fi]
			sub, err := f.Hub().Watch(ctx, registry.Filter{}, mid)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Leader().Backend().Register(ctx, plugin("after", "a"))
			if err != nil {
				t.Fatal(err)
			}
			evs := collect(t, sub, res.Index)
			if snapshot {
				// The restored snapshot is past mid: one reset, then new events.
				if evs[0].EventType != api.EventReset || evs[0].Index <= mid {
					t.Fatalf("first event %s@%d, want a reset past %d", evs[0].EventType, evs[0].Index, mid)
				}
				evs = evs[1:]
			}
			seen := map[string]bool{}
			for _, ev := range evs {
				if ev.Index <= mid {
					t.Fatalf("event at %d redelivered (resumed from %d)", ev.Index, mid)
				}
				if seen[ev.Info.Name] {
					t.Fatalf("%s delivered twice", ev.Info.Name)
				}
				seen[ev.Info.Name] = true
			}
			if !snapshot && len(evs) != 21 {
				t.Fatalf("got %d events after %d, want the 20 later writes and the new one", len(evs), mid)
			}
		})
	}
}
