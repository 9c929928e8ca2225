package cluster

import (
	"context"
	"io"

	"github.com/hashicorp/raft"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// ProposeExpiry proposes an expiry as the leader's lessor does, for the
// tests outside the package.
func (s *Server) ProposeExpiry(ctx context.Context, batch []fsm.ExpiredLease) error {
	return s.proposeExpiry(ctx, batch)
}

// PortMethods are the methods the server port serves by name: the client
// agents' and the servers' own, for tests that walk them all.
func PortMethods() (agent, serverOnlyMethods []string) {
	for m := range agentEndpoints {
		agent = append(agent, m)
	}
	for m := range serverEndpoints {
		serverOnlyMethods = append(serverOnlyMethods, m)
	}
	return agent, serverOnlyMethods
}

// RecordedRequestID is the ID under which the FSM's window records a
// write of kind with request ID id by a caller without a token (ACLs
// off), for the tests that look a record up.
func RecordedRequestID(kind, id string) string {
	return api.ScopeRequestID("", kind, id)
}

// OpenLog opens a stopped server's log as the server does, entries'
// checksums included, for the tests that change what is on disk.
func OpenLog(cfg *Config) (raft.LogStore, io.Closer, error) {
	logs, _, closer, err := openStores(cfg)
	return logs, closer, err
}

// AckRecorded is the index this server recorded of node's reports
// (rollback.go).
func (s *Server) AckRecorded(node string) uint64 {
	a := s.acks.Load()
	a.mu.Lock()
	defer a.mu.Unlock()
	r, _ := a.getLocked(node)
	return r.Index
}

// ReportAck serves a peer's acknowledged-index report (rollback.go) as
// the server port does once the caller proved the server identity.
func (s *Server) ReportAck(node, incarnation string, index uint64, probe bool) error {
	_, err := s.serveAckReport(&ackReport{Node: node, Incarnation: incarnation, Index: index, Probe: probe})
	return err
}

// Apply proposes an encoded command as commit does, without encoding it:
// for the tests that send what no fsm.Request encodes (bytes the leader
// must refuse).
func (s *Server) Apply(ctx context.Context, cmd []byte) (*fsm.ApplyResult, error) {
	return s.proposeCmd(ctx, cmd)
}
