package cluster

import (
	"path/filepath"
)

// Membership types are gossip's: the pool has servers and client agents.
type ()

const ()

func peersFile(dataDir string) string { return filepath.Join(dataDir, "gossip-peers.json") }
