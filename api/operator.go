package api

// AutopilotHealth is the servers' health as GET
// /v1/operator/autopilot/health reports it, in Consul's terms.
type AutopilotHealth struct {
	// Healthy: every server in the Raft configuration is.
	Healthy bool
	// FailureTolerance is how many voters may fail with a quorum of
	// healthy ones left.
	FailureTolerance int
	Leader           string // the leader's ID, "" when none is known
	Servers          []ServerHealth
}

// ServerHealth is one server of the Raft configuration.
type ServerHealth struct {
	ID      string
	Name    string
	Address string // its server port (Raft and RPC)
	// SerfStatus is its gossip status (Consul's name): alive, failed,
	// left, or unknown when gossip has never heard of it.
	SerfStatus string
	Leader     bool
	Voter      bool
	// Healthy: it answered, gossip has it alive, it heard from the
	// leader within the heartbeat timeout (the leader: always), it is in
	// the leader's term, it trails the leader's log by at most
	// MaxTrailingLogs, its applied state is not ahead of the leader's log,
	// and it has not failed to install the leader's snapshots (twice, in
	// the last minute, with its state unchanged since).
	Healthy bool
	// Reason says why it is not healthy ("" when it is).
	Reason string `json:",omitempty"`
	// LastContact is how long ago it heard from the leader, as a Go
	// duration ("0s" on the leader, "" unknown).
	LastContact  string
	LastTerm     uint64 // the term of its last log entry
	LastIndex    uint64 // its last log index
	AppliedIndex uint64
	// IndexLag is the leader's last log index minus this server's.
	IndexLag uint64
	// Error says why its figures are missing (it did not answer).
	Error string `json:",omitempty"`
}

// MaxTrailingLogs is how far behind the leader's log a server may be and
// still be healthy (Consul's autopilot default).
const MaxTrailingLogs = 250

// RaftStats is what a server says of itself for AutopilotHealth.
type RaftStats struct {
	ID           string
	Leader       bool
	LastContact  int64 // nanoseconds since it heard from the leader; 0 on the leader, -1 never
	Term         uint64
	LastTerm     uint64
	LastIndex    uint64
	AppliedIndex uint64
	// RestoreFailures counts the snapshots from the leader that its FSM
	// failed to restore (RestoreError, the last one's error) since its
	// state last changed, while the last of them is recent; 0 from a
	// server of an older release.
	RestoreFailures int    `json:",omitempty"`
	RestoreError    string `json:",omitempty"`
}

// AgentSelf is GET /v1/agent/self: the answering agent's configuration,
// its own member entry and its health.
type AgentSelf struct {
	Config AgentConfig
	Member *Member `json:",omitempty"`
	Health Health
	// Stats are the agent's raft figures (servers; hashicorp/raft's
	// Stats) and the process's.
	Stats map[string]map[string]string
}

// AgentConfig is what AgentSelf says of the agent's setup; no secret.
type AgentConfig struct {
	NodeID          string
	Role            string
	Version         string
	Revision        string `json:",omitempty"`
	ACLEnabled      bool
	ACLDefaultDeny  bool
	GossipEncrypted bool
	TLS             bool
}

// ReapStatus is the leader's guard on reaping (POST
// /v1/operator/reap/resume answers it): while more than PauseAbove of the
// client agents, and at least PauseMinFailed, are failed, the leader
// reaps no failed node.
type ReapStatus struct {
	// Paused: the guard holds the reaping of failed nodes now.
	Paused bool
	// Resumed: an operator resumed reaping while the guard would hold
	// it; it holds again after the failures fall within PauseAbove and
	// then rise above it.
	Resumed bool
	// FailedClients are the client agents failed with plugins still
	// registered; Clients, those and the alive ones (agents that left,
	// and failed ones without plugins, do not count).
	FailedClients  int
	Clients        int
	PauseAbove     float64
	PauseMinFailed int
}
