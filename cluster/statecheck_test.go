package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// A follower whose log was changed on disk together with the entry's
// checksum (a data dir pieced together from copies: nothing any one file
// holds is wrong) serves another registry than the leader's; the state
// check finds it on that follower, and only there.
func TestStateCheckFindsADamagedFollower(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) {
		cfg.LogStore = cluster.LogStoreBolt // overwrites an entry in place
		cfg.StateCheckInterval = 200 * time.Millisecond
		cfg.SnapshotThreshold = 1 << 20 // the changed entry is replayed at restart
	}})
	leader := c.WaitForLeader()
	var changed uint64
	for i := 0; i < 20; i++ {
		res := c.Register(leader, plugin(fmt.Sprintf("ebs-%d", i), "a1"))
		if i == 7 {
			changed = res.Index
		}
	}
	followers := c.Followers()
	c.Eventually(60*time.Second, "every follower's digests compared equal to the leader's", func() bool {
		for _, f := range followers {
			if f.StateChecks().Matches < 2 {
				return false
			}
		}
		return true
	})

	victim := followers[0]
	vi := nodeIndex(c, victim)
	c.Kill(vi)
	renameInLog(t, victim.Config, changed, "ebs-X")
	c.Restart(vi)
	victim = c.Nodes[vi]

	c.Eventually(60*time.Second, "the damaged follower found its state differs", func() bool {
		return victim.StateChecks().Mismatches > 0
	})
	healthy := followers[1]
	before := healthy.StateChecks().Matches
	c.Eventually(60*time.Second, "the healthy follower compared again", func() bool {
		return healthy.StateChecks().Matches > before
	})
	for _, n := range []*testcluster.Node{healthy, c.WaitForLeader()} {
		if st := n.StateChecks(); st.Mismatches != 0 {
			t.Errorf("%s found %d mismatches: %+v", n.Config.NodeID, st.Mismatches, st)
		}
	}
}

func nodeIndex(c *testcluster.Cluster, n *testcluster.Node) int {
	for i, m := range c.Nodes {
		if m == n {
			return i
		}
	}
	panic("not a node of the cluster")
}

// renameInLog rewrites the registration at index in a stopped server's
// log with another name, through the server's own store: the entry's
// checksum is the new entry's.
func renameInLog(t *testing.T, cfg *cluster.Config, index uint64, name string) {
	t.Helper()
	logs, closer, err := cluster.OpenLog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var l raft.Log
	if err := logs.GetLog(index, &l); err != nil {
		t.Fatal(err)
	}
	req, err := fsm.DecodeCommand(l.Data)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := req.(*fsm.RegisterRequest)
	if !ok {
		t.Fatalf("entry %d is a %T", index, req)
	}
	r.Plugin.Name = name
	if l.Data, err = fsm.EncodeCommand(r); err != nil {
		t.Fatal(err)
	}
	if err := logs.StoreLog(&l); err != nil {
		t.Fatal(err)
	}
}
