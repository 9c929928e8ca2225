package cluster_test

import (
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// memberOn returns the agent as server n's gossip has it, if it does.
func memberOn(n *testcluster.Node, cn *testcluster.ClientNode) (gossip.Member, bool) {
	for _, m := range n.Members() {
		if m.Name == cn.Config.NodeID {
			return m, true
		}
	}
	return gossip.Member{}, false
}

// The servers' gossip forgets a client agent gone for longer than
// GossipForgetAfter (so that a fleet's dead hosts do not pile up in it,
// nor in its reconnect loop), but never one whose plugins are still
// registered: the leader marks and reaps only the nodes its gossip knows,
// and a forgotten node's plugins would stay, unmarked, for ever. An agent
// without plugins is forgotten after the interval; one with plugins only
// once reaped, and not at all while reaping is off (where it stays,
// failed, its plugin suspect). Without the servers' Keep the agent with
// plugins is forgotten with its plugin still registered.
func TestGossipForgetsAClientAgentOnlyOnceReaped(t *testing.T) {
	const forgetAfter = 2 * time.Second
	for _, tc := range []struct {
		name      string
		reapAfter time.Duration
	}{
		{"reaped, then forgotten", 2 * time.Second},
		{"reaping off: kept", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.New(t, 1, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) {
				cfg.NodeReapAfter, cfg.GossipForgetAfter = tc.reapAfter, forgetAfter
			}})
			withPlugin, bare, witness := c.AddClient(nil), c.AddClient(nil), c.AddClient(nil)
			c.Register(c.Leader(), hostPlugin(withPlugin.Config.NodeID))
			c.Eventually(60*time.Second, "the leader to see every client agent alive", func() bool {
				return len(statusOnLeader(c, gossip.StatusAlive, withPlugin, bare, witness)) == 3
			})
			withPlugin.Kill()
			bare.Kill()
			c.Eventually(60*time.Second, "the agent without plugins forgotten", func() bool {
				_, known := memberOn(c.Leader(), bare)
				return !known
			})
			if tc.reapAfter > 0 {
				c.Eventually(60*time.Second, "the agent with a plugin reaped and forgotten", func() bool {
					_, known := memberOn(c.Leader(), withPlugin)
					if !known && pluginOnLeader(t, c, withPlugin) {
						t.Fatal("the agent was forgotten with its plugin still registered: it will never be reaped")
					}
					return !known
				})
				return
			}
			// Each agent is declared dead by its own probes: the one
			// without plugins may be forgotten before this one has left
			// suspicion (which reads as alive).
			c.Eventually(60*time.Second, "the agent with a plugin declared failed", func() bool {
				m, known := memberOn(c.Leader(), withPlugin)
				return known && m.Status == gossip.StatusFailed
			})
			// Several forget passes (one a second with fast gossip) past
			// the interval.
			deadline := time.Now().Add(3 * forgetAfter)
			for time.Now().Before(deadline) {
				m, known := memberOn(c.Leader(), withPlugin)
				if !known || m.Status != gossip.StatusFailed {
					t.Fatalf("the agent with a registered plugin: known %v, status %q; want kept, failed", known, m.Status)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if !pluginOnLeader(t, c, withPlugin) {
				t.Fatal("the plugin was deregistered with reaping off")
			}
			c.Eventually(60*time.Second, "the kept agent's plugin suspect", func() bool {
				h, agree := healthEverywhere(t, c, withPlugin)
				return agree && h == api.CheckNode
			})
		})
	}
}
