package cluster

import (
	"errors"
	"path/filepath"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/gossip"
)

// Membership types are gossip's: the pool has servers and client agents.
type ()

const ()

func peersFile(dataDir string) string { return filepath.Join(dataDir, "gossip-peers.json") }

// keepMember is the gossip pool's Keep: a node with plugins still
// registered is not forgotten, however long it has been gone. The leader
// marks (markNodes) and reaps (reapDead) only the nodes its gossip knows,
// and a forgotten node would be neither failed nor alive to it: its
// plugins would stay registered, unmarked, for ever. Once reaped, it has
// none, and is forgotten at the pool's next pass.
func (s *Server) keepMember(m gossip.Member) bool {
	return s.fsm.State().HasNodeInstances(m.Name)
}

// gossipRaftAddrs is raft's ServerAddressProvider: a server's address as
// gossip last heard it (gossip.Pool.ServerRaftAddr). Where gossip knows
// none (before this server has joined, or two members claim the ID), raft
// falls back to the configuration's address. A member claiming a live
// server's ID makes it ambiguous, so the configured address is kept; one
// claiming a dead server's ID gets that server's RPCs, which with TLS on
// it cannot answer without a server certificate (docs/security.md).
type gossipRaftAddrs struct {
	// self and selfAddr are this server's: it knows its own address
	// before gossip does (raft asks for it as it starts), as Consul's
	// provider answers its own ID.
	self     raft.ServerID
	selfAddr raft.ServerAddress
	// pool is set once gossip has started, after Raft's transport.
	pool atomic.Pointer[gossip.Pool]
}

var errNoGossipAddr = errors.New("gossip knows no one address for this server")

func (g *gossipRaftAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if id == g.self {
		return g.selfAddr, nil
	}
	if p := g.pool.Load(); p != nil {
		if addr, ok := p.ServerRaftAddr(string(id)); ok {
			return raft.ServerAddress(addr), nil
		}
	}
	return "", errNoGossipAddr
}
