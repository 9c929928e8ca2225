package cluster

import (
	"time"

	"github.com/plugreg/plugreg/agentrpc"
)

// What the servers of the configuration speak (gossip.Meta's RPCVersion),
// and the oldest of them: what a new command type or field waits for in a
// rolling upgrade, asked by the writes (write.go) and by commit, which
// picks the commands' encoding (propose.go).

// rpcVersionProtoCommands is the RPCVersion (gossip.Meta) of servers that
// apply fsm.RegisterProtoCommand and fsm.DeregisterProtoCommand. A server
// writes registrations and deregistrations in protobuf only while every
// server of the configuration says so; before that (a rolling upgrade) it
// writes them in msgpack, which every release applies.
const rpcVersionProtoCommands = 4

// rpcVersionConditionalRegister is the RPCVersion (gossip.Meta) of servers
// that apply fsm.ConditionalRegisterCommand, which a node-bound caller's
// registrations are once every server of the configuration says so (see
// registerRequest for before).
const rpcVersionConditionalRegister = 5

// rpcVersionHostSync is the RPCVersion (gossip.Meta) of servers that
// apply fsm.HostSyncCommand and fsm.NodeHealthBatchCommand and serve
// agentrpc.HostSync: a host's sync is one entry, and the leader's marks
// of many nodes one, once every server of the configuration says so (one
// write per instance, and per node, before).
const rpcVersionHostSync = agentrpc.HostSyncRPCVersion

// rpcVersionFSMReadIndex is the RPCVersion (gossip.Meta) of servers whose
// read index names an entry the FSM sees (readIndexLocal): while every
// server of the configuration says so, a read waits for it on the
// journal alone, without waitApplied's backstop.
const rpcVersionFSMReadIndex = rpcVersionHostSync + 1

// rpcVersion is what this release's servers say they speak.
const rpcVersion = rpcVersionFSMReadIndex

// serverBelow names a server of the Raft configuration whose gossip does
// not say it speaks RPCVersion version (or that gossip does not know), ""
// when every one does: what a new command type or field waits for.
//
// It answers from what it learned within the last second (the writes
// that ask are many, and the question needs the configuration and every
// gossip member). A server that joins within that second may see an entry
// it cannot apply; adding a server older than the rest is outside the
// upgrade rule of docs/operations.md (upgrade every server, never add an
// older one), and a check made on every write would still race the join.
func (s *Server) serverBelow(version int) string {
	o := s.oldest.Load()
	if o == nil || time.Since(o.checked) >= time.Second {
		o = s.findOldestServer()
		s.oldest.Store(o)
	}
	if o.version < version {
		return o.id
	}
	return ""
}

// oldestServer is a server of the configuration with the lowest RPCVersion
// (0 when gossip does not know it), as learned at checked.
type oldestServer struct {
	id      string
	version int
	checked time.Time
}

func (s *Server) findOldestServer() *oldestServer {
	o := &oldestServer{version: rpcVersion, checked: time.Now()}
	servers, err := s.RaftConfiguration()
	if err != nil || s.gossip == nil {
		// Not remembered: asked again by the next write.
		return &oldestServer{id: "(the configuration is unreadable)"}
	}
	known := map[string]int{}
	for _, m := range s.gossip.Members() {
		known[m.Meta.ID] = m.Meta.RPCVersion
	}
	for _, srv := range servers {
		if v := known[string(srv.ID)]; v < o.version {
			o.id, o.version = string(srv.ID), v
		}
	}
	return o
}
