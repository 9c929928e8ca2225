package cluster

import (
	"path/filepath"

	"github.com/plugreg/plugreg/gossip"
)

// Membership types are gossip's: the pool has servers and client agents.
type (
	MemberMeta   = gossip.Meta
	MemberStatus = gossip.Status
	Member       = gossip.Member
)

const (
	StatusAlive  = gossip.StatusAlive
	StatusFailed = gossip.StatusFailed
	StatusLeft   = gossip.StatusLeft
)

func peersFile(dataDir string) string { return filepath.Join(dataDir, "gossip-peers.json") }
