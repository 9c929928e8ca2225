package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// healthEverywhere returns the agent's plugin's health on every running
// server ("" passing, "node" or another check when suspect, "gone") when
// they all agree, or a description of the disagreement.
func healthEverywhere(t *testing.T, c *testcluster.Cluster, cn *testcluster.ClientNode) (string, bool) {
	t.Helper()
	var first string
	for i, n := range c.Running() {
		st, _, err := n.Read(context.Background(), api.Stale)
		if err != nil {
			t.Fatalf("read on %s: %v", n.NodeID(), err)
		}
		h := "gone"
		if p := st.Instance("csi", "ebs", cn.Config.NodeID); p != nil {
			h = ""
			if p.Suspect() {
				h = p.Health.Check
			}
		}
		if i == 0 {
			first = h
		} else if h != first {
			return fmt.Sprintf("%s says %q, %s %q", c.Running()[0].NodeID(), first, n.NodeID(), h), false
		}
	}
	return first, true
}

// The instances of a client agent that fails in gossip are suspect on
// every server (marked by the leader, one entry) until the agent is alive
// again; the other agents' instances stay passing, and nothing is reaped.
func TestFailedNodeInstancesAreSuspect(t *testing.T) {
	c := startReapCluster(t, 3, 2, 10*time.Minute, cluster.ReapBrakes{})
	dead, live := c.Clients[0], c.Clients[1]
	dead.Kill()
	c.Eventually(60*time.Second, "the failed agent's plugin suspect everywhere", func() bool {
		h, agree := healthEverywhere(t, c, dead)
		return agree && h == api.CheckNode
	})
	st, _, err := c.Leader().Read(context.Background(), api.Stale)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Instance("csi", "ebs", dead.Config.NodeID)
	if p.Health.Reason == "" || p.Health.LastSeen.IsZero() || p.Health.LastSeen.After(time.Now()) {
		t.Fatalf("health %+v", p.Health)
	}
	if h, agree := healthEverywhere(t, c, live); !agree || h != "" {
		t.Fatalf("the live agent's plugin: %q (%v)", h, agree)
	}
	dead.Restart()
	c.Eventually(60*time.Second, "the plugin passing again everywhere", func() bool {
		h, agree := healthEverywhere(t, c, dead)
		return agree && h == ""
	})
}
