package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// hashicorp/raft issue 697, on both log stores: a deposed leader whose
// uncommitted suffix runs past the index of the snapshot the new leader
// sends it. Stock raft's installSnapshot emptied the whole log of raft-wal
// (a MonotonicLogStore) and kept boltdb's conflicting suffix, and on both
// left raft's last log index where the suffix ended, so the node refused
// every AppendEntries for good. The patched raft (third_party/raft)
// discards a log that does not hold the snapshot's last entry and takes
// the snapshot's as its last. Small segments and trailing logs make the
// new leader compact past the point where the two logs part.
//
// Whether the leader still has the entry where the logs part when they
// meet again depends on timing (raft-wal drops whole segments; a
// replication request may be built before the compaction): a deposed
// leader that truncated its suffix the usual way never reaches the case,
// and the test runs the scenario again, at most four times.
func TestDeposedLeaderWithSuffixPastTheSnapshotCatchesUp(t *testing.T) {
	for _, store := range []string{cluster.LogStoreWAL, cluster.LogStoreBolt} {
		t.Run(store, func(t *testing.T) {
			for attempt := 1; attempt <= 4; attempt++ {
				if deposedLeaderInstallsSnapshot(t, store) {
					return
				}
				t.Logf("attempt %d did not reach the case: the deposed leader truncated its suffix the usual way", attempt)
			}
			t.Fatal("four attempts never reached a deposed leader installing a snapshot below its suffix")
		})
	}
}

// deposedLeaderInstallsSnapshot runs the scenario once and says whether it
// reached the case; it fails t if the deposed leader does not catch up.
func deposedLeaderInstallsSnapshot(t *testing.T, store string) bool {
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) {
		cfg.LogStore = store
		cfg.WALSegmentSize = 16 << 10
		cfg.TrailingLogs = 8
		cfg.SnapshotThreshold = 1 << 20 // snapshots only when the test asks
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first, err := c.Nodes[0].Backend().Register(ctx, plugin("before", "a"))
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually(10*time.Second, "every node at the first write", func() bool {
		for _, n := range c.Nodes {
			if n.AppliedIndex() < first.Index {
				return false
			}
		}
		return true
	})
	old := c.Leader()
	oi := indexOf(c, old)
	c.Partition(oi)
	// The isolated leader appends what it is sent until its lease runs
	// out; none of it can commit.
	const suffix = 1500
	var wg sync.WaitGroup
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	for i := 0; i < suffix; i++ {
		cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: plugin("lost", fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			old.Apply(short, cmd)
		}()
	}
	wg.Wait()
	cancelShort()
	oldLast := statU(t, old, "last_log_index")
	t.Logf("the isolated leader %s's log ends at %d", old.Config.NodeID, oldLast)
	// majorityLeader waits for a leader among the others.
	majorityLeader := func() *testcluster.Node {
		var leader *testcluster.Node
		c.Eventually(20*time.Second, "a leader in the majority", func() bool {
			for i, n := range c.Nodes {
				if i != oi && n.IsLeader() {
					leader = n
					return true
				}
			}
			return false
		})
		return leader
	}
	leader := majorityLeader()
	// The majority writes past the point where the logs part, but not as
	// far as the deposed leader's suffix, snapshots and compacts.
	if oldLast < first.Index+100 {
		t.Fatalf("the isolated leader appended %d entries before its lease ran out: too few to reach the case", oldLast-first.Index)
	}
	for i := 0; statU(t, leader, "last_log_index") < first.Index+(oldLast-first.Index)/2; i++ {
		if _, err := leader.Backend().Register(ctx, plugin("during", fmt.Sprint(i))); err != nil {
			// A busy machine may hold an election: on with the next
			// leader of the majority.
			t.Logf("write on the majority: %v", err)
			leader = majorityLeader()
		}
	}
	if err := leader.Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	snap := statU(t, leader, "last_snapshot_index")
	t.Logf("the new leader snapshotted at %d", snap)
	if snap >= oldLast {
		t.Fatalf("the setup does not reach the case: snapshot at %d, the deposed suffix to %d", snap, oldLast)
	}
	// A replication request the new leader built before the compaction
	// (entries from where the logs part) may be waiting on a dial into
	// the partition, which drops packets; delivered at the heal, it
	// truncates the suffix the usual way. The transport gives up on it
	// after its 10 s timeout, and the next request is built after the
	// compaction: a snapshot.
	time.Sleep(11 * time.Second)
	c.Heal()
	// A write after the snapshot: a node stuck in the case never applies
	// it (its log cannot take entries), a node past the case does.
	probe, err := leader.Backend().Register(ctx, plugin("probe", "a"))
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually(30*time.Second, "the deposed leader to catch up", func() bool { return old.AppliedIndex() >= probe.Index })
	// It takes no snapshot of its own (the threshold): one it has came
	// from the leader. Below its suffix's end, it is the case under test;
	// otherwise it truncated its suffix the usual way first.
	installed := statU(t, old, "last_snapshot_index")
	t.Logf("the deposed leader caught up; the snapshot it installed ends at %d, its suffix at %d", installed, oldLast)
	if installed == 0 || installed >= oldLast {
		c.Shutdown()
		return false
	}
	res, err := leader.Backend().Register(ctx, plugin("after", "a"))
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually(30*time.Second, "the deposed leader to take later writes", func() bool { return old.AppliedIndex() >= res.Index })
	st := old.State()
	if st.Instance("csi", "lost", "0") != nil || st.Instance("csi", "after", "a") == nil {
		t.Fatal("the deposed leader's state is not the leader's")
	}
	return true
}

func statU(t *testing.T, n *testcluster.Node, key string) uint64 {
	t.Helper()
	var v uint64
	if _, err := fmt.Sscan(n.Stats()[key], &v); err != nil {
		t.Fatalf("raft stat %s: %v", key, err)
	}
	return v
}
