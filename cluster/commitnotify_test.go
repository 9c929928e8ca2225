package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"github.com/plugreg/plugreg/tests/framework/testlog"
)

// TestFollowersLearnTheCommitAtOnce runs a cluster whose raft would tell
// followers the commit index of the last write only after an hour
// (CommitTimeout), so that only the leader's commit notices can make a
// follower apply it: every write through any node must be acknowledged
// (the follower waits for its own apply) and applied on every node with no
// write after it, and no follower may log a refused notice.
func TestFollowersLearnTheCommitAtOnce(t *testing.T) {
	var logs testlog.Buffer
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(i int, cfg *cluster.Config) {
		cfg.CommitTimeout = time.Hour
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.NodeID, Level: hclog.Warn, Output: &logs})
	}})
	ctx := ctxT(t)
	c.Eventually(10*time.Second, "every node applying the bootstrap", func() bool {
		for _, n := range c.Nodes {
			if n.AppliedIndex() == 0 {
				return false
			}
		}
		return true
	})
	bootLogs := len(logs.String()) // raft's own refusals while the nodes bootstrap
	cases := []struct {
		name   string
		writes int
		via    func() *testcluster.Node
	}{
		{"one write through the leader", 1, c.Leader},
		{"one write through a follower", 1, func() *testcluster.Node { return c.Followers()[0] }},
		{"a burst through both followers, then quiet", 40, nil},
	}
	for k, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var last uint64
			for i := 0; i < tc.writes; i++ {
				n := c.Followers()[i%2]
				if tc.via != nil {
					n = tc.via()
				}
				res, err := n.Backend().Register(ctx, plugin(fmt.Sprintf("c%d-p%d", k, i), "a1"))
				if err != nil {
					t.Fatalf("write %d through %s: %v", i, n.NodeID(), err)
				}
				if got := n.AppliedIndex(); got < res.Index {
					t.Fatalf("%s acknowledged %d having applied %d", n.NodeID(), res.Index, got)
				}
				last = max(last, res.Index)
			}
			c.Eventually(10*time.Second, fmt.Sprintf("every node applying %d with no later write", last), func() bool {
				for _, n := range c.Nodes {
					if n.AppliedIndex() < last {
						return false
					}
				}
				return true
			})
		})
	}
	after := logs.String()[bootLogs:]
	for _, bad := range []string{"previous log", "mis-match"} {
		if strings.Contains(after, bad) {
			t.Errorf("a follower refused a notice (%q):\n%s", bad, after)
		}
	}
}
