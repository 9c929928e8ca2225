package cluster

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// Raft's dial by ID: this server's own address before gossip has started
// (raft asks for it as it starts), and for another server before gossip
// knows it, no address, so that raft falls back to its configuration's.
func TestGossipRaftAddrsBeforeGossip(t *testing.T) {
	g := &gossipRaftAddrs{self: "n1", selfAddr: "10.0.0.1:7300"}
	if addr, err := g.ServerAddr("n1"); err != nil || addr != "10.0.0.1:7300" {
		t.Fatalf("own ID: %q, %v; want 10.0.0.1:7300", addr, err)
	}
	if addr, err := g.ServerAddr(raft.ServerID("n2")); !errors.Is(err, errNoGossipAddr) || addr != "" {
		t.Fatalf("another ID before gossip: %q, %v; want errNoGossipAddr", addr, err)
	}
}
