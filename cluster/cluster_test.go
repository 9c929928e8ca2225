package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/internal/testcluster"
)

func plugin(name, alloc string) *fsm.PluginInfo {
	return &fsm.PluginInfo{Type: "csi", Name: name, AllocID: alloc, NodeID: "host1",
		ConnectionInfo: &fsm.ConnectionInfo{SocketPath: "/run/" + name + ".sock"}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A write through any node is seen by a linearizable read on every node.
func TestWriteAnywhereReadEverywhere(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	for i, n := range c.Nodes {
		res, err := n.Store().RegisterPlugin(ctx, plugin(fmt.Sprintf("p%d", i), "a1"))
		if err != nil {
			t.Fatalf("register through %s: %v", n.NodeID(), err)
		}
		// Acknowledged through n: already applied on n.
		if got := n.AppliedIndex(); got < res.Index {
			t.Fatalf("%s acknowledged index %d but has applied only %d", n.NodeID(), res.Index, got)
		}
		for _, m := range c.Nodes {
			st, _, err := m.Read(ctx, cluster.Linearizable)
			if err != nil {
				t.Fatalf("linearizable read on %s: %v", m.NodeID(), err)
			}
			if st.Instance("csi", fmt.Sprintf("p%d", i), "a1") == nil {
				t.Fatalf("%s does not see the write made through %s at %d (state at %d)", m.NodeID(), n.NodeID(), res.Index, st.Index())
			}
		}
	}
}

func TestLeaderKilledNewLeaderTakesWrites(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	old := c.Leader()
	if _, err := old.Store().RegisterPlugin(ctx, plugin("before", "a1")); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes {
		if n == old {
			c.Kill(i)
		}
	}
	leader := c.WaitForLeader()
	if leader == old {
		t.Fatal("the killed node is still leader")
	}
	for _, n := range c.Running() {
		if _, err := n.Store().RegisterPlugin(ctx, plugin("after-"+n.NodeID(), "a1")); err != nil {
			t.Fatalf("write through %s after failover: %v", n.NodeID(), err)
		}
		st, _, err := n.Read(ctx, cluster.Linearizable)
		if err != nil || st.Instance("csi", "before", "a1") == nil {
			t.Fatalf("%s lost the write acknowledged before failover (err %v)", n.NodeID(), err)
		}
	}
}

// A follower that missed many writes catches up by log replay, and, once
// the leader has compacted its log, by installing a snapshot.
func TestFollowerCatchesUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		writes   int
		snapshot bool
	}{
		{"log replay", 50, false},
		{"snapshot install", 300, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.New(t, 3, testcluster.Options{Modify: func(i int, cfg *cluster.Config) {
				cfg.SnapshotThreshold = 64
				cfg.TrailingLogs = 16
				cfg.SnapshotInterval = 200 * time.Millisecond
			}})
			ctx := ctxT(t)
			f := c.Followers()[0]
			idx := indexOf(c, f)
			c.Kill(idx)
			leader := c.Leader()
			var last uint64
			for i := 0; i < tc.writes; i++ {
				res, err := leader.Store().RegisterPlugin(ctx, plugin(fmt.Sprintf("p%d", i), "a"))
				if err != nil {
					t.Fatal(err)
				}
				last = res.Index
			}
			if tc.snapshot {
				if err := leader.Snapshot(); err != nil {
					t.Fatalf("snapshot: %v", err)
				}
			}
			c.Restart(idx)
			n := c.Nodes[idx]
			c.Eventually(20*time.Second, "the restarted follower to catch up", func() bool {
				return n.AppliedIndex() >= last
			})
			st, _, err := n.Read(ctx, cluster.Stale)
			if err != nil || len(st.List("csi")) != tc.writes {
				t.Fatalf("follower has %d plugins, want %d (err %v)", len(st.List("csi")), tc.writes, err)
			}
		})
	}
}

func indexOf(c *testcluster.Cluster, n *testcluster.Node) int {
	for i, m := range c.Nodes {
		if m == n {
			return i
		}
	}
	return -1
}

// A node restarted on its data dir keeps its identity and state, and
// rejoins without -join.
func TestRestartKeepsState(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	res, err := c.Nodes[0].Store().RegisterPlugin(ctx, plugin("keep", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Nodes {
		c.Restart(i) // one at a time: quorum holds throughout
		c.WaitForLeader()
	}
	for _, n := range c.Nodes {
		st, _, err := n.Read(ctx, cluster.Linearizable)
		if err != nil {
			t.Fatalf("read on %s: %v", n.NodeID(), err)
		}
		p := st.Instance("csi", "keep", "a1")
		if p == nil || p.CreateIndex != res.Index {
			t.Fatalf("%s lost the write after restart", n.NodeID())
		}
	}
	peers, _ := c.Leader().Peers()
	if len(peers) != 3 {
		t.Fatalf("peers after restarts: %v", peers)
	}
}
