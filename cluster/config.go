package cluster

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tlsutil"
	"github.com/plugreg/plugreg/tracing"
)

// Config of one server node.
type Config struct {
	// NodeID names the node in Raft and memberlist. It is kept in the data
	// dir: a restart with another ID is refused.
	NodeID string
	// DataDir holds the node ID, Raft's log store (raft-wal or raft.db,
	// per LogStore) and snapshots/. Required.
	DataDir string
	// BindAddr is the IP all listeners use and outgoing connections come
	// from.
	BindAddr   string
	ServerPort int // Raft and internal RPC; 0 picks a free port
	GossipPort int // memberlist, TCP and UDP; 0 picks a free port
	// HTTPAddr is advertised to other nodes (members list); this package
	// does not serve HTTP.
	HTTPAddr string

	// BootstrapExpect: once this many servers are known, each bootstraps
	// Raft with all of them. Zero: never bootstrap (join an existing
	// cluster).
	BootstrapExpect int
	// Join is a list of gossip addresses (host:port) to join at start.
	Join []string
	// RetryJoin keeps trying Join until one succeeds, every RetryInterval.
	RetryJoin     bool
	RetryInterval time.Duration

	// Raft timing. Zero means raft's default.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long the leader waits, without new writes,
	// before telling followers the commit index. It bounds how far
	// followers' applies (their events, their linearizable reads) trail
	// the leader's. Zero: 5ms (raft's own default is 50ms).
	CommitTimeout time.Duration
	// NoCommitNotify turns off telling followers the commit index as soon
	// as the leader applied an entry (see raftx.CommitNotifier); followers then
	// learn it only from raft's own AppendEntries. For measuring what the
	// notices buy, and as an escape hatch.
	NoCommitNotify bool
	// MaxAppendEntries bounds the entries per AppendEntries RPC and per
	// batch raft hands the FSM (zero: raft's 64).
	MaxAppendEntries int
	// LogStore chooses the Raft log and stable store of a new data dir:
	// "wal" (hashicorp/raft-wal; "" means wal) or "boltdb". A data dir
	// keeps the store it was created with ("" opens whichever it holds).
	LogStore string
	// WALSegmentSize is the size of each raft-wal segment file, in bytes
	// (zero: 16 MiB). raft-wal drops old entries a whole segment at a
	// time and serves the unsealed tail segment whole, so with large
	// segments a leader keeps every entry since the segment began and
	// sends followers that entry rather than a snapshot. Smaller segments
	// compact sooner; the fault suite uses them to keep snapshot installs
	// under fault.
	WALSegmentSize int
	// SnapshotThreshold: log entries between snapshots (zero: 8192).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration // zero: 120s (raft's default)
	TrailingLogs      uint64        // zero: 10240
	// ApplyTimeout bounds the wait to enqueue a write on the leader (zero:
	// 5s). Past it the write was definitely not applied.
	ApplyTimeout time.Duration

	// ReconcileInterval is how often the leader reconciles memberlist with
	// the Raft configuration (also done on every membership event).
	ReconcileInterval time.Duration
	// NodeReapAfter: a node dead for longer has its plugins deregistered by
	// the leader. Zero: 30s. Negative: never.
	NodeReapAfter time.Duration
	// ReapBrakes bound how fast, and whether, the leader reaps.
	ReapBrakes ReapBrakes
	// GossipForgetAfter: a client agent failed or gone for longer is
	// forgotten by this server's gossip (gossip.Config.ForgetAfter), once
	// none of its plugins is registered: a node is kept until it is
	// reaped, however long the brakes hold it, so that the leader still
	// marks and reaps it. Zero: the longer of NodeReapAfter and
	// gossip.DefaultForgetAfter; negative: never.
	GossipForgetAfter time.Duration
	// LeaseExpiryRate is the most leased instances the leader expires a
	// second, in one entry per leaseTick (leases.go). Zero:
	// DefaultLeaseExpiryRate.
	LeaseExpiryRate int
	// StateCheckInterval is how often the leader appends a state check,
	// at which every server takes the digest of its registry and compares
	// it with the leader's at the one before (statecheck.go). Zero:
	// DefaultStateCheckInterval. Negative: never (checks another leader
	// appends are still taken and compared).
	StateCheckInterval time.Duration
	// DeadServerCleanup: a failed voter dead for longer is removed from
	// the Raft configuration, never below MinQuorum voters. Zero: never.
	DeadServerCleanup time.Duration
	// MinQuorum is the fewest voters dead-server cleanup may leave
	// (zero: BootstrapExpect, or 3).
	MinQuorum int

	// GossipFast uses memberlist's local-network timing (faster failure
	// detection); for tests and dev.
	GossipFast bool
	// GossipEncryption encrypts gossip (zero: plaintext).
	GossipEncryption gossip.Encryption

	// ApplyLog, when set, is a file to which the node appends one JSON
	// line per log entry its FSM applies (index, term, request ID, command,
	// result): ground truth for the fault-injection suite. Off in
	// production.
	ApplyLog string

	// JournalSize is the number of events the node's journal keeps (zero:
	// registry.DefaultJournalSize).
	JournalSize int

	// ACLEnabled: writes and ACL calls that client agents make over RPC
	// carry a token, checked as the HTTP API checks it (the HTTP API's
	// own switch is httpapi.ACLConfig); ACLDefaultDeny refuses a call
	// without one.
	ACLEnabled, ACLDefaultDeny bool

	// ACLInitialManagementToken, with ACLEnabled, is the secret of the
	// operator token a leader creates when it finds the cluster not
	// bootstrapped (Consul's initial_management token): for an installer
	// that cannot run plugreg acl bootstrap and keep its answer, such as a
	// Helm chart, which generates the secret and hands it to every server.
	// Only its hash reaches the log, as any token's.
	ACLInitialManagementToken string

	// TLS, when set, secures the server port (Raft and RPC, incoming and
	// outgoing) by its policy; nil: plaintext. The HTTP listener is the
	// caller's (cmd/plugreg serves it with the same Configurator).
	TLS *tlsutil.Configurator

	// ShutdownTimeout bounds how long Shutdown waits for Raft to stop
	// before it closes Raft's connections under it, and as long again
	// before it abandons Raft's goroutines (zero: 3s).
	ShutdownTimeout time.Duration

	Logger hclog.Logger

	// Tracer records the spans of traced requests (cluster/tracing.go);
	// nil: tracing off.
	Tracer *tracing.Tracer
}

// DefaultConfig returns a Config with the defaults filled in; set NodeID,
// DataDir and BindAddr.
func DefaultConfig() *Config {
	return &Config{
		BindAddr:           "127.0.0.1",
		ServerPort:         7300,
		GossipPort:         7301,
		RetryInterval:      time.Second,
		CommitTimeout:      5 * time.Millisecond,
		ApplyTimeout:       5 * time.Second,
		ReconcileInterval:  2 * time.Second,
		StateCheckInterval: DefaultStateCheckInterval,
		NodeReapAfter:      30 * time.Second,
		ReapBrakes:         DefaultReapBrakes(),
		ShutdownTimeout:    3 * time.Second,
		Logger:             hclog.NewNullLogger(),
	}
}

// Validate checks fields against each other.
func (c *Config) Validate() error {
	var errs []error
	if err := api.ValidateNewIdentifier("NodeID", c.NodeID); err != nil {
		errs = append(errs, fmt.Errorf("node id: %w", err))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is required"))
	}
	if net.ParseIP(c.BindAddr) == nil {
		errs = append(errs, fmt.Errorf("bind address %q is not an IP", c.BindAddr))
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect == 2 {
		// Two voters tolerate no failure and split on any partition.
		errs = append(errs, fmt.Errorf("bootstrap-expect %d: use 1, 3 or 5", c.BootstrapExpect))
	}
	for _, p := range []int{c.ServerPort, c.GossipPort} {
		if p < 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("port %d out of range", p))
		}
	}
	if err := ValidateLogStore(c.LogStore, c.WALSegmentSize); err != nil {
		errs = append(errs, err)
	}
	if err := c.ReapBrakes.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.LeaseExpiryRate < 0 {
		errs = append(errs, fmt.Errorf("lease expiry rate %d: want a positive number (0: %d)", c.LeaseExpiryRate, DefaultLeaseExpiryRate))
	}
	if c.ServerPort != 0 && c.ServerPort == c.GossipPort {
		errs = append(errs, fmt.Errorf("server and gossip ports are both %d", c.ServerPort))
	}
	return errors.Join(errs...)
}

// ValidateLogStore checks Config.LogStore and Config.WALSegmentSize, as
// Validate does: for a caller that refuses them before it touches the
// data dir.
func ValidateLogStore(kind string, walSegmentSize int) error {
	var errs []error
	switch kind {
	case "", LogStoreBolt, LogStoreWAL:
	default:
		errs = append(errs, fmt.Errorf("log store %q: use %q or %q", kind, LogStoreBolt, LogStoreWAL))
	}
	if walSegmentSize != 0 && (walSegmentSize < minWALSegmentSize || walSegmentSize > maxWALSegmentSize) {
		errs = append(errs, fmt.Errorf("wal segment size %d: use %d to %d bytes (or 0)", walSegmentSize, minWALSegmentSize, maxWALSegmentSize))
	}
	return errors.Join(errs...)
}

func (c *Config) withDefaults() *Config {
	cp := *c
	d := DefaultConfig()
	if cp.CommitTimeout == 0 {
		cp.CommitTimeout = d.CommitTimeout
	}
	if cp.RetryInterval == 0 {
		cp.RetryInterval = d.RetryInterval
	}
	if cp.ApplyTimeout == 0 {
		cp.ApplyTimeout = d.ApplyTimeout
	}
	if cp.ReconcileInterval == 0 {
		cp.ReconcileInterval = d.ReconcileInterval
	}
	if cp.NodeReapAfter == 0 {
		cp.NodeReapAfter = d.NodeReapAfter
	}
	if cp.StateCheckInterval == 0 {
		cp.StateCheckInterval = d.StateCheckInterval
	}
	if cp.GossipForgetAfter == 0 {
		cp.GossipForgetAfter = max(cp.NodeReapAfter, gossip.DefaultForgetAfter)
	}
	cp.ReapBrakes = cp.ReapBrakes.withDefaults()
	if cp.LeaseExpiryRate == 0 {
		cp.LeaseExpiryRate = DefaultLeaseExpiryRate
	}
	if cp.ShutdownTimeout <= 0 {
		cp.ShutdownTimeout = d.ShutdownTimeout
	}
	if cp.MinQuorum == 0 {
		cp.MinQuorum = max(cp.BootstrapExpect, 3)
	}
	if cp.Logger == nil {
		cp.Logger = d.Logger
	}
	return &cp
}
