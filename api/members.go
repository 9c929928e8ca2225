package api

// Node roles in the gossip pool.
const (
	RoleServer = "server" // a Raft voter
	RoleClient = "client" // a host agent: gossip, HTTP, discovery; no Raft
)

// Member is one node of the gossip pool as the answering node sees it
// (GET /v1/members).
type Member struct {
	Name       string
	Role       string // RoleServer or RoleClient
	GossipAddr string
	RaftAddr   string `json:",omitempty"` // servers: Raft and internal RPC
	HTTPAddr   string
	Status     string // alive, failed, left
	Leader     bool
	Voter      bool
}

// Health is the body of GET /v1/health.
type Health struct {
	// Status is "ok", or why not: "no_leader", "catching_up",
	// "no_server", "missing_required_types", "required_types_unknown".
	Status            string
	Node              string
	Role              string
	Leader            string
	AppliedIndex      uint64
	RaftState         string // servers: Leader, Follower, Candidate, Shutdown; clients: ""
	Term              uint64
	CommitIndex       uint64
	LastSnapshotIndex uint64
	// Servers a client agent currently knows alive.
	KnownServers int `json:",omitempty"`
	// MissingTypes are the agent's required plugin types its node has no
	// instance of (-required-plugin-types); Reason says why it is not
	// ready when the status alone does not.
	MissingTypes []string `json:",omitempty"`
	Reason       string   `json:",omitempty"`
}

// KeyringStatus is one agent's gossip encryption keys, base64, the primary
// one first (GET /v1/agent/keyring).
type KeyringStatus struct {
	Node       string `json:",omitempty"`
	Keys       []string
	PrimaryKey string
}

// KeyringRequest is the body of POST (install), PUT (use) and DELETE
// (remove) /v1/agent/keyring.
type KeyringRequest struct {
	Key string
}
