package agent

import (
	"time"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
)

// membership is what a Client needs of its gossip pool: where the servers
// are, and its part in the pool. *gossip.Pool is the real one; staticServers
// stands in for it when Config.StaticServers is set.
type membership interface {
	Addr() string
	Keyring() *gossip.Keyring
	JoinAtStart(addrs []string, retry bool, interval time.Duration) error
	AliveServers() []gossip.Meta
	NumMembers() int
	Members() []gossip.Member
	AnnounceLeaving(timeout time.Duration) error
	Leave(timeout time.Duration) error
	Shutdown() error
}

// staticServers is a fixed server list in place of gossip, for the fleet
// simulator (plugreg-bench -fleet, tools/bench), which runs more agents on one
// machine than memberlist instances fit: such an agent is not a member of
// the pool, so the servers never see it (no suspect mark, no reaping), and
// it never learns that a server died (every listed server counts as alive;
// an unreachable one is skipped per call, as a dead one is).
type staticServers []string

func (s staticServers) Addr() string                                    { return "" }
func (s staticServers) Keyring() *gossip.Keyring                        { return nil }
func (s staticServers) JoinAtStart([]string, bool, time.Duration) error { return nil }
func (s staticServers) Members() []gossip.Member                        { return nil }
func (s staticServers) AnnounceLeaving(time.Duration) error             { return nil }
func (s staticServers) Leave(time.Duration) error                       { return nil }
func (s staticServers) Shutdown() error                                 { return nil }

// NumMembers counts the servers only: without gossip the agent knows no
// other member.
func (s staticServers) NumMembers() int { return len(s) }

// AliveServers is every listed server, by its RPC address.
func (s staticServers) AliveServers() []gossip.Meta {
	out := make([]gossip.Meta, 0, len(s))
	for _, addr := range s {
		// Servers of this release (the simulator builds them from the same
		// tree): every method this agent calls is served, host sync too.
		out = append(out, gossip.Meta{ID: addr, RaftAddr: addr, Role: api.RoleServer, RPCVersion: agentrpc.HostSyncRPCVersion})
	}
	return out
}
