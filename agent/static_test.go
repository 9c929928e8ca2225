package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// A client agent given the servers' addresses (StaticServers) reaches them
// without gossip: its writes and its upstream event stream work as a
// gossiping agent's, and the servers' gossip never sees it.
func TestStaticServersReplaceGossip(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	var servers []string
	for _, n := range c.Nodes {
		servers = append(servers, n.RaftAddr())
	}
	cases := []struct {
		name     string
		static   bool
		inGossip bool
	}{
		{name: "gossip", static: false, inGossip: true},
		{name: "static", static: true, inGossip: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cn := c.AddClient(func(cfg *agent.Config) {
				cfg.NodeID = "host-" + tc.name
				if tc.static {
					cfg.StaticServers, cfg.Join = servers, nil
				}
			})
			c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return cn.LiveServers() == 3 })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			events, _, err := cn.Subscribe(ctx, []string{"csi"}, nil, time.Second)
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			res, err := cn.Register(ctx, plugin(cn.NodeID(), "ebs-"+tc.name, "a1"))
			if err != nil {
				t.Fatalf("register: %v", err)
			}
			for got := false; !got; {
				select {
				case ev := <-events:
					got = ev.EventType == api.EventRegistered && ev.Index == res.Index
				case <-ctx.Done():
					t.Fatalf("no event of the write at %d upstream", res.Index)
				}
			}
			c.Eventually(20*time.Second, "the servers' gossip view", func() bool {
				for _, n := range c.Nodes {
					seen := false
					for _, m := range n.Members() {
						seen = seen || m.Name == cn.NodeID()
					}
					if seen != tc.inGossip {
						return false
					}
				}
				return true
			})
		})
	}
}
