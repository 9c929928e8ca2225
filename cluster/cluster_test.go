package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

func plugin(name, alloc string) *api.PluginInfo {
	return &api.PluginInfo{Type: "csi", Name: name, AllocID: alloc, NodeID: "host1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"}}
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
		res, err := n.Backend().Register(ctx, plugin(fmt.Sprintf("p%d", i), "a1"))
		if err != nil {
			t.Fatalf("register through %s: %v", n.NodeID(), err)
		}
		// Acknowledged through n: already applied on n.
		if got := n.AppliedIndex(); got < res.Index {
			t.Fatalf("%s acknowledged index %d but has applied only %d", n.NodeID(), res.Index, got)
		}
		for _, m := range c.Nodes {
			st, _, err := m.Read(ctx, api.Linearizable)
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
	if _, err := old.Backend().Register(ctx, plugin("before", "a1")); err != nil {
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
		if _, err := n.Backend().Register(ctx, plugin("after-"+n.NodeID(), "a1")); err != nil {
			t.Fatalf("write through %s after failover: %v", n.NodeID(), err)
		}
		st, _, err := n.Read(ctx, api.Linearizable)
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
				if tc.snapshot {
					// boltdb compacts to 16 trailing entries, so the
					// follower must install the snapshot; raft-wal (the
					// default) drops only whole 16 MiB segments.
					cfg.LogStore = cluster.LogStoreBolt
				}
			}})
			ctx := ctxT(t)
			f := c.Followers()[0]
			idx := indexOf(c, f)
			c.Kill(idx)
			leader := c.Leader()
			var last uint64
			for i := 0; i < tc.writes; i++ {
				res, err := leader.Backend().Register(ctx, plugin(fmt.Sprintf("p%d", i), "a"))
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
			st, _, err := n.Read(ctx, api.Stale)
			if err != nil || len(st.List("csi")) != tc.writes {
				t.Fatalf("follower has %d plugins, want %d (err %v)", len(st.List("csi")), tc.writes, err)
			}
			// Raft records the installed snapshot just after the FSM restored it.
			if tc.snapshot {
				c.Eventually(5*time.Second, "raft to record the installed snapshot", func() bool {
					return n.Stats()["last_snapshot_index"] != "0"
				})
			} else if got := n.Stats()["last_snapshot_index"]; got != "0" {
				t.Fatalf("follower installed a snapshot at %s; want log replay", got)
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
	res, err := c.Nodes[0].Backend().Register(ctx, plugin("keep", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Nodes {
		c.Restart(i) // one at a time: quorum holds throughout
		c.WaitForLeader()
	}
	for _, n := range c.Nodes {
		st, _, err := n.Read(ctx, api.Linearizable)
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

// A partitioned minority answers writes and linearizable reads with a
// no-leader error (never a hang past the deadline) but serves stale reads;
// after healing it catches up.
func TestPartitionedMinority(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	before, err := c.Nodes[0].Backend().Register(ctx, plugin("before", "a"))
	if err != nil {
		t.Fatal(err)
	}
	minority := indexOf(c, c.Followers()[0])
	m := c.Nodes[minority]
	// A commit needs only a majority: let the future minority apply it too.
	c.Eventually(10*time.Second, "every node to apply the first write", func() bool { return m.AppliedIndex() >= before.Index })
	c.Partition(minority)
	c.Eventually(10*time.Second, "the minority to lose its leader", func() bool { return m.Leader() == "" })

	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = m.Backend().Register(short, plugin("lost", "a"))
	var ce *api.Error
	if !errors.As(err, &ce) || ce.Outcome() != api.NotApplied {
		t.Fatalf("write on the minority: %v, want a not-applied cluster error", err)
	}
	if _, _, err := m.Read(short, api.Linearizable); !errors.As(err, &ce) {
		t.Fatalf("linearizable read on the minority: %v, want a cluster error", err)
	}
	st, meta, err := m.Read(ctx, api.Stale)
	if err != nil || st.Instance("csi", "before", "a") == nil || meta.KnownLeader {
		t.Fatalf("stale read on the minority: err %v, meta %+v", err, meta)
	}

	// The majority goes on.
	var majority *testcluster.Node
	for i, n := range c.Nodes {
		if i != minority {
			majority = n
		}
	}
	res, err := majority.Backend().Register(ctx, plugin("during", "a"))
	if err != nil {
		t.Fatalf("write on the majority: %v", err)
	}
	c.Heal()
	c.Eventually(20*time.Second, "the healed node to catch up", func() bool { return m.AppliedIndex() >= res.Index })
	st, _, err = m.Read(ctx, api.Linearizable)
	if err != nil || st.Instance("csi", "during", "a") == nil || st.Instance("csi", "lost", "a") != nil {
		t.Fatalf("after heal: err %v", err)
	}
}

// A node that left is removed from the configuration, and can come back.
func TestLeaveAndRejoin(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	leaving := indexOf(c, c.Followers()[0])
	n := c.Nodes[leaving]
	id := n.NodeID()
	if err := n.Leave(); err != nil {
		t.Fatalf("leave: %v", err)
	}
	c.Kill(leaving) // stops its HTTP side; the server is already down
	c.Eventually(10*time.Second, "the leader to remove the node that left", func() bool {
		peers, _ := c.Leader().Peers()
		return len(peers) == 2
	})
	c.Restart(leaving)
	c.Eventually(20*time.Second, "the node to be a voter again", func() bool {
		servers, _ := c.Leader().RaftConfiguration()
		for _, s := range servers {
			if string(s.ID) == id {
				return len(servers) == 3
			}
		}
		return false
	})
	ctx := ctxT(t)
	if _, err := c.Nodes[leaving].Backend().Register(ctx, plugin("back", "a")); err != nil {
		t.Fatalf("write through the rejoined node: %v", err)
	}
}

// Writes that carry a request ID apply once, however often they are sent,
// through whichever node.
func TestRequestIDAcrossNodes(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := api.WithRequestID(ctxT(t), "req-1")
	first, err := c.Nodes[0].Backend().Register(ctx, plugin("once", "a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		p := plugin("once", "a")
		p.Version = "changed"
		again, err := n.Backend().Register(ctx, p)
		if err != nil || again != first {
			t.Fatalf("retry through %s: %+v, %v; want %+v", n.NodeID(), again, err, first)
		}
	}
	st, _, _ := c.Nodes[2].Read(ctx, api.Linearizable)
	if p := st.Instance("csi", "once", "a"); p == nil || p.Version == "changed" {
		t.Fatal("a retried write applied again")
	}
}

// New fails with a clear error, and without leaking or panicking, when it
// cannot start.
func TestNewFailsCleanly(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	cases := []struct {
		name   string
		modify func(c *cluster.Config)
		want   string
	}{
		{"server port in use", func(c *cluster.Config) { c.ServerPort = port }, "listen on server port"},
		{"join fails without retry", func(c *cluster.Config) { c.Join = []string{fmt.Sprintf("127.0.0.1:%d", closedPort)} }, "join"},
		{"bootstrap-expect 2", func(c *cluster.Config) { c.BootstrapExpect = 2 }, "bootstrap-expect"},
		{"no node id", func(c *cluster.Config) { c.NodeID = "" }, "node id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cluster.DefaultConfig()
			cfg.NodeID, cfg.DataDir = "n1", t.TempDir()
			cfg.ServerPort, cfg.GossipPort = 0, 0
			tc.modify(cfg)
			s, err := cluster.New(cfg)
			if err == nil {
				s.Shutdown()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	// A data dir belongs to one node ID.
	dir := t.TempDir()
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.ServerPort, cfg.GossipPort, cfg.BootstrapExpect = "n1", dir, 0, 0, 1
	s, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	cfg.NodeID = "n2"
	if _, err := cluster.New(cfg); err == nil || !strings.Contains(err.Error(), "belongs to node") {
		t.Fatalf("reusing n1's data dir as n2: %v", err)
	}
}

// A command the leader refuses keeps its identity when it was forwarded by
// a follower: a version-skew "unknown command" is not reported as invalid
// input, nor as an unknown outcome.
func TestForwardedRejectionKeepsItsIdentity(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	f := c.Followers()[0]
	cases := []struct {
		name string
		cmd  []byte
		want error
	}{
		{"unknown command type", []byte{0x7e, 0x80}, api.ErrUnknownCommand},
		{"malformed body", []byte{byte(fsm.RegisterCommand), 0xc1}, api.ErrMalformed},
		{"empty entry", []byte{}, api.ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := f.Apply(ctxT(t), tc.cmd)
			if err != nil {
				t.Fatalf("forwarded apply: %v (want a rejection, not a failure)", err)
			}
			if !errors.Is(res.Err, tc.want) {
				t.Fatalf("forwarded apply rejected with %v, want errors.Is %v", res.Err, tc.want)
			}
		})
	}
}

// Writes through a follower under load travel to the leader in batches,
// and each is answered as if it had gone alone: applied once, at its own
// index, on the follower before the answer, seen on every node.
func TestForwardedWritesBatch(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	f := c.Followers()[0]
	ctx := ctxT(t)
	const writers, perWriter = 32, 20
	type outcome struct {
		index uint64
		err   error
	}
	results := make(chan outcome, writers*perWriter)
	for w := range writers {
		go func() {
			for i := range perWriter {
				res, err := f.Backend().Register(ctx, plugin(fmt.Sprintf("w%d", w), fmt.Sprintf("a%d", i)))
				if err == nil && f.AppliedIndex() < res.Index {
					err = fmt.Errorf("acknowledged at %d before the follower applied it (%d)", res.Index, f.AppliedIndex())
				}
				results <- outcome{res.Index, err}
			}
		}()
	}
	seen := map[uint64]bool{}
	for range writers * perWriter {
		o := <-results
		if o.err != nil {
			t.Fatal(o.err)
		}
		if seen[o.index] {
			t.Fatalf("two writes answered with index %d", o.index)
		}
		seen[o.index] = true
	}
	st := f.ForwardStats()
	t.Logf("%d writes, %d of them in %d batches", writers*perWriter, st.BatchedWrites, st.Batches)
	if st.Batches == 0 || st.BatchedWrites < 2*st.Batches {
		t.Fatalf("no batching under %d concurrent writers: %+v", writers, st)
	}
	for _, n := range c.Nodes {
		s, _, err := n.Read(ctx, api.Linearizable)
		if err != nil {
			t.Fatal(err)
		}
		if s.Len() != writers*perWriter {
			t.Fatalf("%s holds %d instances, want %d", n.NodeID(), s.Len(), writers*perWriter)
		}
	}
}

// Every server stopped at once and back on its data dir at a new address
// (Kubernetes rescheduling every server pod, a release reinstalled on its
// volumes): the Raft configuration names only the old addresses, yet the
// servers elect a leader (raft dials them where gossip heard them), the
// leader writes the new addresses into the configuration, and the
// registry is as it was.
func TestEveryServerBackAtANewAddressAtOnce(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	res, err := c.Nodes[0].Backend().Register(ctx, plugin("moved", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]string{}
	for _, n := range c.Nodes {
		before[n.NodeID()] = n.RaftAddr()
	}
	c.MoveAll()
	for _, n := range c.Nodes {
		if before[n.NodeID()] == n.RaftAddr() {
			t.Fatalf("%s is back at %s, its old address: the test moves nothing", n.NodeID(), n.RaftAddr())
		}
	}
	leader := c.WaitForLeader()
	c.Eventually(30*time.Second, "the configuration holds every server's new address", func() bool {
		peers, err := leader.Peers()
		if err != nil || len(peers) != 3 {
			return false
		}
		now := map[string]bool{}
		for _, n := range c.Nodes {
			now[n.RaftAddr()] = true
		}
		for _, p := range peers {
			if !now[p] {
				return false
			}
		}
		return true
	})
	for _, n := range c.Nodes {
		st, _, err := n.Read(ctx, api.Linearizable)
		if err != nil {
			t.Fatalf("read on %s: %v", n.NodeID(), err)
		}
		if p := st.Instance("csi", "moved", "a1"); p == nil || p.CreateIndex != res.Index {
			t.Fatalf("%s lost the write across the move", n.NodeID())
		}
	}
	if _, err := leader.Backend().Register(ctx, plugin("after", "a1")); err != nil {
		t.Fatalf("a write after the move: %v", err)
	}
}
