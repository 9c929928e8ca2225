package cluster

import (
	"path/filepath"

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
