package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster/raftx"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/internal/atomicfile"
	"github.com/plugreg/plugreg/internal/datadir"
	"github.com/plugreg/plugreg/internal/nodeid"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/tracing"
	"github.com/plugreg/plugreg/transport"
)

// Server is one plugreg server node.
type Server struct {
	cfg    *Config
	logger hclog.Logger

	// The registry: the FSM's state, the events of its applies, and the
	// subscriptions that read them.
	fsm     *fsm.FSM
	journal *registry.Journal
	traced  *applyTracer // a traced write's apply and publish spans; nil with tracing off
	hub     *registry.Hub

	// Raft and its stores in the data dir.
	raft        *raft.Raft
	trans       *raft.NetworkTransport
	raftAddr    string
	stable      raft.StableStore
	logs        raft.LogStore         // the LogCache in front of the log store
	storeCloser io.Closer             // closes the log and stable stores
	dirLock     *datadir.Lock         // the data dir held while this server may write there
	applyLog    *applyLog             // nil unless Config.ApplyLog
	commits     *raftx.CommitNotifier // nil with Config.NoCommitNotify
	raftGone    chan struct{}         // closed once Raft has stopped (or was never started)

	// The server port: the internal RPC it answers and the calls it makes.
	mux  *transport.Mux
	pool *transport.Pool
	// rpcReady is set once s.raft exists; internal RPC is refused before
	// (the mux accepts connections from the moment the port opens).
	rpcReady atomic.Bool

	// The write path.
	fwd forwarding // a follower's writes on their way to the leader (propose.go)
	// oldest is serverBelow's last answer (versions.go).
	oldest atomic.Pointer[oldestServer]

	// Membership: gossip, and what the leader learned of its members.
	gossip *gossip.Pool
	// raftAddrs is Raft's transport's way to a server: where gossip last
	// heard it (membership.go).
	raftAddrs gossipRaftAddrs
	proofs    proofs          // members' refused claims to be servers (proofs.go)
	restores  restoreFailures // the FSM's failed restores, for autopilot (autopilot.go)
	lead      leaderDuties    // what this server holds and does while it leads

	// Integrity: the checks of a replica against the others and of the
	// data dir against what the others saw of it.
	checker *stateChecker // the cross-replica state check (statecheck.go)
	// acks are the other servers' acknowledged indexes (rollback.go),
	// set once the stores are open; answered before Raft runs.
	acks        atomic.Pointer[ackRecords]
	incarnation string     // the data dir's (rollback.go)
	fatal       chan error // a failure that stops the server (Fatal)

	ctx      context.Context // cancelled by Shutdown
	cancel   context.CancelFunc
	wg       sync.WaitGroup // every goroutine the Server starts
	shutOnce sync.Once
	shutErr  error
}

// forwarding is a follower's part in the write path (propose.go): the
// writes waiting to be forwarded to the leader, and what it knows of the
// leader's batches.
type forwarding struct {
	queue   chan *fwdItem // writes waiting to be forwarded
	support atomic.Pointer[batchSupport]
	batches atomic.Int64 // ApplyBatch RPCs sent
	batched atomic.Int64 // writes in them
}

// leaderDuties are what a server holds and does while it leads (leader.go,
// reapbrakes.go, leases.go), and what it counts of them.
type leaderDuties struct {
	notify chan bool   // raft's leadership changes, for the leader loop
	ready  atomic.Bool // leader, and a barrier of this term has applied
	// brakes are the leader's brakes on reaping (reapbrakes.go); nil
	// while this server does not lead.
	brakes atomic.Pointer[reapBrakes]
	// lessor holds the leases while this server leads (leases.go); nil
	// otherwise, and until the term's lessor has taken over.
	lessor        atomic.Pointer[lessor]
	expiryEntries atomic.Uint64 // ExpireCommands this server proposed and applied
	expired       atomic.Uint64 // instances they removed
	// expireHook, in tests, sees each expiry batch before it is proposed.
	expireHook atomic.Pointer[func([]fsm.ExpiredLease)]
}

// New starts a server node: opens its data dir, starts Raft, gossip and
// the leader monitor, and joins the addresses in cfg.Join.
func New(cfg *Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := datadir.Create(cfg.DataDir); err != nil {
		return nil, err
	}
	lock, err := datadir.Hold(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := nodeid.Claim(cfg.DataDir, cfg.NodeID); err != nil {
		lock.Release()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:      cfg,
		dirLock:  lock,
		logger:   cfg.Logger.With("node", cfg.NodeID),
		journal:  registry.NewJournal(cfg.JournalSize),
		ctx:      ctx,
		cancel:   cancel,
		raftGone: make(chan struct{}),
		fatal:    make(chan error, 1),
	}
	s.lead.notify = make(chan bool, 16)
	s.fwd.queue = make(chan *fwdItem, maxForwardBatch)
	if err := s.start(); err != nil {
		s.Shutdown()
		return nil, err
	}
	return s, nil
}

// start brings up everything New promises; on error, New shuts down what
// was started.
func (s *Server) start() (err error) {
	cfg := s.cfg
	if cfg.Tracer != nil {
		s.traced = &applyTracer{tracer: cfg.Tracer, hub: func() *registry.Hub { return s.hub }, published: tracing.NewPublished()}
		s.journal.OnApplied(s.traced.publishing)
	}
	s.fsm = fsm.New(s.journal)
	s.checker = newStateChecker(cfg.NodeID, s.logger.Named("state-check"))
	s.fsm.OnStateCheck(s.checker.applied)
	s.goFunc(func() { s.checker.run(s.ctx.Done()) })
	if s.hub, err = registry.NewHub(s.journal, 0); err != nil {
		return err
	}

	s.pool = transport.NewPool(cfg.BindAddr, 2*time.Second, cfg.TLS)
	s.mux, err = transport.Listen(net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.ServerPort)),
		transport.ServeRPC(s.ctx, s.handleRPC, transport.ServeOptions{MaxRequestBytes: rpcRequestBound}), s.logger.Named("transport"), cfg.TLS)
	if err != nil {
		return err
	}
	s.raftAddr = s.mux.Addr().String()
	if !cfg.TLS.ProvesServers() {
		s.logger.Warn("the server port proves no peer's identity: anyone who reaches it may act as a server of this cluster (join Raft, propose log entries, remove servers); run with -verify-incoming -verify-server-hostname and certificates (docs/security.md)",
			"server_port", s.raftAddr)
	}
	if err := s.setupRaft(); err != nil {
		return err
	}
	s.rpcReady.Store(true)

	s.gossip, err = gossip.Start(gossip.Config{
		NodeID: cfg.NodeID, BindAddr: cfg.BindAddr, Port: cfg.GossipPort, Fast: cfg.GossipFast,
		Meta:      gossip.Meta{ID: cfg.NodeID, RaftAddr: s.raftAddr, HTTPAddr: cfg.HTTPAddr, Role: api.RoleServer, RPCVersion: rpcVersion},
		PeersFile: peersFile(cfg.DataDir), Encryption: cfg.GossipEncryption, Logger: s.logger.Named("memberlist"),
		ForgetAfter: cfg.GossipForgetAfter, Keep: s.keepMember,
	})
	if err != nil {
		return err
	}
	s.raftAddrs.pool.Store(s.gossip)

	for range forwardSenders {
		s.goFunc(s.runForwarder)
	}
	s.goFunc(s.monitorLeadership)
	s.goFunc(s.emitMetrics)
	s.goFunc(s.reportAcks)
	if cfg.BootstrapExpect > 1 {
		s.goFunc(s.bootstrapLoop)
	}
	return s.gossip.JoinAtStart(cfg.Join, cfg.RetryJoin, cfg.RetryInterval)
}

func (s *Server) setupRaft() error {
	cfg := s.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = s.logger.Named("raft")
	rc.NotifyCh = s.lead.notify
	rc.BatchApplyCh = true
	// Zero in our Config means raft's default.
	override(&rc.HeartbeatTimeout, cfg.HeartbeatTimeout)
	override(&rc.ElectionTimeout, cfg.ElectionTimeout)
	override(&rc.LeaderLeaseTimeout, cfg.LeaderLeaseTimeout)
	override(&rc.CommitTimeout, cfg.CommitTimeout)
	override(&rc.SnapshotThreshold, cfg.SnapshotThreshold)
	override(&rc.MaxAppendEntries, cfg.MaxAppendEntries)
	override(&rc.SnapshotInterval, cfg.SnapshotInterval)
	override(&rc.TrailingLogs, cfg.TrailingLogs)
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("raft config: %w", err)
	}

	// A peers.json is checked before the stores are opened: a refused
	// file leaves the data dir as it was (recover.go).
	rec, recovering, err := s.loadPeersFile()
	if err != nil {
		return err
	}
	var store raft.LogStore
	store, s.stable, s.storeCloser, err = openStores(cfg)
	if err != nil {
		return err
	}
	if s.logs, err = raft.NewLogCache(512, store); err != nil {
		return err
	}
	if f, ok := s.storeCloser.(syncFailer); ok {
		s.goFunc(func() { s.watchSyncs(f) })
	}
	s.acks.Store(newAckRecords(s.stable))
	snaps, err := raftx.OpenSnapshotStore(cfg.DataDir, 2, s.logger.Named("snapshot"))
	if err != nil {
		return err
	}
	// What the stores just made, and what an older release or another
	// user left looser, is made the agent's alone (internal/datadir).
	if err := datadir.Tighten(cfg.DataDir); err != nil {
		return err
	}
	datadir.WarnIfListable(cfg.DataDir, s.logger)
	// The stores just created raft.db or wal/ and snapshots/ in the data
	// dir (and node-id may be new): their names are durable once it is.
	if err := atomicfile.SyncDir(cfg.DataDir); err != nil {
		return err
	}
	s.raftAddrs.self, s.raftAddrs.selfAddr = raft.ServerID(cfg.NodeID), raft.ServerAddress(s.raftAddr)
	s.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  streamLayer{s.mux.RaftLayer()},
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  s.logger.Named("raft-net"),
		// raft's pipeline can park a follower's replication for good
		// (hashicorp/raft issue 612; see raftx.NoPipelining).
		MaxRPCsInFlight: raftx.NoPipelining,
		// A server is dialled where gossip last heard it, not where the
		// Raft configuration put it: when every server comes back at a
		// new address at once (pods rescheduled, a release reinstalled
		// on its volumes), the configuration names only old addresses,
		// and without this no vote could reach anyone, for good. The
		// leader then writes the new addresses into the configuration
		// (reconcile).
		ServerAddressProvider: &s.raftAddrs,
	})
	if recovering {
		if err := s.recoverCluster(rc, s.logs, snaps, rec); err != nil {
			return err
		}
	}
	existing, err := raft.HasExistingState(s.logs, s.stable, snaps)
	if err != nil {
		// The stores opened, so what failed is a read: a damaged value.
		return &StoreError{Path: storePath(cfg), NodeID: cfg.NodeID, Err: fmt.Errorf("inspect raft state: %w", err)}
	}
	machine := &machine{fsm: s.fsm, traced: s.traced, onRestore: s.recordRestore}
	if cfg.ApplyLog != "" {
		if s.applyLog, err = openApplyLog(cfg.ApplyLog); err != nil {
			return err
		}
		machine.applyLog = s.applyLog
	}
	var trans raft.Transport = raftx.HeartbeatsInOrder{NetworkTransport: s.trans}
	if !cfg.NoCommitNotify {
		s.commits = raftx.NewCommitNotifier(s.ctx, s.trans, raft.RPCHeader{
			ProtocolVersion: rc.ProtocolVersion, ID: []byte(rc.LocalID), Addr: s.trans.EncodePeer(rc.LocalID, s.trans.LocalAddr()),
		}, s.IsLeader)
		trans = raftx.Watch(s.commits, s.trans)
		machine.commits = s.commits
	}
	if err := raftx.CheckSnapshots(cfg.DataDir); err != nil {
		var refused *raftx.SnapshotError
		if errors.As(err, &refused) {
			return &StoreError{Path: refused.Path, NodeID: cfg.NodeID, Err: refused.Err}
		}
		return err
	}
	stored, err := raftx.CheckLog(store, snaps)
	if err != nil {
		return &StoreError{Path: storePath(cfg), NodeID: cfg.NodeID, Err: err}
	}
	// Before Raft, which votes as soon as it runs: a data dir restored
	// from an older copy forgot its votes (rollback.go).
	if s.incarnation, err = incarnation(s.stable); err != nil {
		return &StoreError{Path: storePath(cfg), NodeID: cfg.NodeID, Err: err}
	}
	if err := s.checkNotRolledBack(s.incarnation, stored); err != nil {
		return err
	}
	if s.raft, err = raftx.NewRaftNoPanic(func() (*raft.Raft, error) {
		return raft.NewRaft(rc, machine, s.logs, s.stable, snaps, trans)
	}); err != nil {
		return &StoreError{Path: cfg.DataDir, NodeID: cfg.NodeID, Err: fmt.Errorf("raft start: %w", err)}
	}
	if !existing && cfg.BootstrapExpect == 1 {
		err := s.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: raft.ServerAddress(s.raftAddr), Suffrage: raft.Voter,
		}}}).Error()
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	return nil
}

// override sets *dst to v unless v is the zero value.
func override[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

// every calls fn every d until fn returns false or the server shuts down.
func (s *Server) every(d time.Duration, fn func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if !fn() {
			return
		}
	}
}

// goFunc runs f in a goroutine the Server owns and waits for in Shutdown.
func (s *Server) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// bootstrapLoop waits until BootstrapExpect servers are known, checks that
// none of them is already part of a cluster, and bootstraps Raft with all
// of them. Every node does the same with the same set.
func (s *Server) bootstrapLoop() {
	s.every(200*time.Millisecond, func() bool {
		if s.hasPeers() {
			return false
		}
		var servers []raft.Server
		alive := s.gossip.AliveServers() // client agents never vote
		for _, m := range alive {
			servers = append(servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr), Suffrage: raft.Voter})
		}
		if len(servers) < s.cfg.BootstrapExpect {
			return true
		}
		// Every member in the first configuration proves it is the server
		// it claims to be, as the leader asks before AddVoter; a refused
		// claim is waited out, never left out: servers that bootstrapped
		// with different sets would make two clusters.
		for _, m := range alive {
			if err := s.proveServer(m); err != nil {
				if s.proofs.refused(m) {
					s.logger.Warn("not bootstrapping with a gossip member that did not prove to be that server; waiting", "id", m.ID, "addr", m.RaftAddr, "error", err)
				}
				return true
			}
		}
		switch has, err := s.anyPeerBootstrapped(servers); {
		case err != nil:
			// Not knowing is not "no": bootstrapping beside a peer
			// that has a cluster would make two. Ask again.
			s.logger.Debug("cannot tell yet whether a peer has a cluster", "error", err)
			return true
		case has:
			s.logger.Info("a peer already has a cluster; waiting to be added")
			return false
		}
		err := s.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			s.logger.Error("bootstrap failed", "error", err)
			return true
		}
		s.logger.Info("bootstrapped", "servers", len(servers))
		return false
	})
}

func (s *Server) hasPeers() bool {
	f := s.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// anyPeerBootstrapped asks every other server whether it has a Raft
// configuration. A peer that cannot answer (not up, still starting, its
// configuration unreadable) makes the answer unknown: an error.
func (s *Server) anyPeerBootstrapped(servers []raft.Server) (bool, error) {
	for _, srv := range servers {
		if string(srv.ID) == s.cfg.NodeID {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		var peers []string
		err := s.pool.Call(ctx, string(srv.Address), rpcPeers, struct{}{}, &peers)
		cancel()
		if err != nil {
			return false, fmt.Errorf("ask %s for its peers: %w", srv.ID, err)
		}
		if len(peers) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// Hub is the node's watch hub: subscriptions to the events this server
// applies.
func (s *Server) Hub() *registry.Hub { return s.hub }

// NodeID is this node's ID.
func (s *Server) NodeID() string { return s.cfg.NodeID }

// RaftAddr is this node's server address (Raft and RPC).
func (s *Server) RaftAddr() string { return s.raftAddr }

// GossipAddr is this node's memberlist address.
func (s *Server) GossipAddr() string { return s.gossip.Addr() }

// GossipKeyring is the gossip encryption keyring (nil: plaintext).
func (s *Server) GossipKeyring() *gossip.Keyring { return s.gossip.Keyring() }

// LiveServers is how many servers gossip says are alive.
func (s *Server) LiveServers() int { return len(s.gossip.AliveServers()) }

// GossipMembers is how many members gossip counts alive or suspect: the
// fleet's size as this server sees it.
func (s *Server) GossipMembers() int { return s.gossip.NumMembers() }

// Members returns the gossip pool as this node sees it.
func (s *Server) Members() []gossip.Member { return s.gossip.Members() }

// Leader returns the leader's server address, "" when none is known.
func (s *Server) Leader() string {
	addr, _ := s.raft.LeaderWithID()
	return string(addr)
}

// LeaderID returns the leader's node ID, "" when none is known.
func (s *Server) LeaderID() string {
	_, id := s.raft.LeaderWithID()
	return string(id)
}

// IsLeader reports whether this node is the leader.
func (s *Server) IsLeader() bool { return s.raft.State() == raft.Leader }

// Peers returns the server addresses in the Raft configuration.
func (s *Server) Peers() ([]string, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", err)
	}
	var out []string
	for _, srv := range f.Configuration().Servers {
		out = append(out, string(srv.Address))
	}
	return out, nil
}

// RaftConfiguration returns the servers in the Raft configuration.
func (s *Server) RaftConfiguration() ([]raft.Server, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

// Stats returns raft's stats (state, term, indexes, ...).
func (s *Server) Stats() map[string]string { return s.raft.Stats() }

// AppliedIndex is the index of the last entry this node's FSM applied.
func (s *Server) AppliedIndex() uint64 { return s.fsm.State().Index() }

// State is this server's applied state, as of its last applied entry
// (no read barrier: see Read for a consistent read).
func (s *Server) State() *fsm.State { return s.fsm.State() }

// LastContact is the time since this node last heard from the leader (zero
// on the leader).
func (s *Server) LastContact() time.Duration {
	if s.IsLeader() {
		return 0
	}
	lc := s.raft.LastContact()
	if lc.IsZero() {
		return -1
	}
	return time.Since(lc)
}

// Snapshot asks raft to take a snapshot now (tests, operators).
func (s *Server) Snapshot() error { return s.raft.Snapshot().Error() }

// TransferLeadership hands leadership to another voter.
func (s *Server) TransferLeadership() error {
	if err := s.raft.LeadershipTransfer().Error(); err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	return nil
}

// RemovePeer removes a server from the Raft configuration (leader only).
// An id the leader's configuration does not hold is refused (api.ErrNotFound,
// in Consul's words) before anything is proposed: raft would append a
// configuration entry that removes nothing and answer success, which
// hides a mistyped id from the operator. The check and the removal are
// not atomic: a server another call removes in between is gone either
// way, and this call then appends raft's entry that removes nobody and
// succeeds: the outcome the operator asked for.
func (s *Server) RemovePeer(id string) error {
	// Only the leader's configuration is the one a removal changes (a
	// follower's may lag it); a follower's RemoveServer fails with
	// raft.ErrNotLeader, which the caller reports.
	if s.IsLeader() {
		f := s.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return fmt.Errorf("remove peer %s: %w", id, err)
		}
		if !slices.ContainsFunc(f.Configuration().Servers, func(srv raft.Server) bool { return srv.ID == raft.ServerID(id) }) {
			return notFound(fmt.Sprintf("id %q was not found in the Raft configuration", id))
		}
	}
	if err := s.raft.RemoveServer(raft.ServerID(id), 0, 0).Error(); err != nil {
		return fmt.Errorf("remove peer %s: %w", id, err)
	}
	return nil
}

// Leave leaves the cluster gracefully: hands leadership over when this node
// leads, announces the departure over gossip, asks the leader (over RPC,
// which does not depend on gossip reaching it in time) to remove it from
// the Raft configuration and waits, briefly, until it has, then leaves the
// gossip pool and shuts down.
func (s *Server) Leave() error {
	if s.IsLeader() {
		if err := s.raft.LeadershipTransfer().Error(); err != nil {
			s.logger.Warn("leadership transfer before leave failed", "error", err)
		}
	}
	if err := s.gossip.AnnounceLeaving(2 * time.Second); err != nil {
		s.logger.Warn("gossip leave intent failed", "error", err)
	}
	deadline := time.Now().Add(3*s.cfg.ReconcileInterval + 5*time.Second)
	for !s.removedOrAlone() {
		if time.Now().After(deadline) {
			s.logger.Warn("leaving without confirmation that the leader removed this node")
			break
		}
		if err := s.askLeaderToRemove(); err != nil {
			s.logger.Debug("asking the leader to remove this node", "error", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.gossip.Leave(5 * time.Second); err != nil {
		s.logger.Warn("gossip leave failed", "error", err)
	}
	return s.Shutdown()
}

// removedOrAlone reports whether this node is out of the Raft
// configuration, or the only voter (nobody to hand the data to).
func (s *Server) removedOrAlone() bool {
	servers, err := s.RaftConfiguration()
	if err != nil {
		return false
	}
	for _, srv := range servers {
		if string(srv.ID) == s.cfg.NodeID {
			return len(servers) == 1
		}
	}
	return true
}

func (s *Server) askLeaderToRemove() error {
	if s.IsLeader() { // the transfer failed: remove ourselves
		return s.removeLeaving(s.cfg.NodeID)
	}
	leader := s.Leader()
	if leader == "" {
		return ErrNoLeader
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	var none struct{}
	return s.pool.Call(ctx, leader, rpcLeave, &leaveArgs{ID: s.cfg.NodeID}, &none)
}

// removeLeaving removes a server that is leaving from the Raft
// configuration (leader only), and remembers that it left so that
// reconcile does not add it back.
func (s *Server) removeLeaving(id string) error {
	s.gossip.MarkLeft(id)
	if err := s.raft.RemoveServer(raft.ServerID(id), 0, 0).Error(); err != nil {
		return fmt.Errorf("remove leaving server %s: %w", id, err)
	}
	s.logger.Info("removed server", "id", id, "reason", "left")
	return nil
}

// Shutdown stops the node: Raft, gossip, transport, stores and every
// subscription. It does not leave the cluster (the others see a failure).
// Idempotent. It returns within about twice Config.ShutdownTimeout whatever
// state the peers are in: when Raft does not stop in time, its connections
// are closed under it, and if it still does not stop, its goroutines are
// abandoned (logged, and the stores left open for them) and Shutdown
// returns ErrShutdownAbandoned.
func (s *Server) Shutdown() error {
	s.shutOnce.Do(func() {
		s.cancel()
		var errs []error
		raftStopped := true
		if s.raft != nil {
			var err error
			raftStopped, err = s.stopRaft()
			errs = append(errs, err)
		}
		// Whatever Raft did not answer by now it never will: release
		// its waiters (raftx.Await). Also when Raft was abandoned:
		// Shutdown returns anyway.
		close(s.raftGone)
		if s.gossip != nil {
			errs = append(errs, s.gossip.Shutdown())
		}
		if s.trans != nil {
			errs = append(errs, s.trans.Close())
		}
		if s.mux != nil {
			errs = append(errs, s.mux.Close())
		}
		if s.pool != nil {
			s.pool.Close()
		}
		if s.commits != nil {
			s.commits.Wait() // its sends end with the transport
		}
		s.wg.Wait()
		if raftStopped {
			// Only once Raft is gone: its goroutines use the stores.
			if s.applyLog != nil {
				errs = append(errs, s.applyLog.Close())
			}
			if s.storeCloser != nil {
				errs = append(errs, s.storeCloser.Close())
			}
			// Kept when Raft was abandoned: it may still write there.
			errs = append(errs, s.dirLock.Release())
		}
		if s.hub != nil {
			s.hub.Shutdown()
		}
		s.shutErr = errors.Join(errs...)
	})
	return s.shutErr
}

// stopRaft shuts Raft down within two ShutdownTimeouts, closing the
// server's connections under it after the first (raftx.Shutdown). It
// reports whether Raft's goroutines all ended; ErrShutdownAbandoned when
// they did not.
func (s *Server) stopRaft() (bool, error) {
	stopped, err := raftx.Shutdown(s.raft, s.cfg.ShutdownTimeout, func() {
		if s.trans != nil {
			s.trans.Close()
		}
		if s.mux != nil {
			s.mux.Close()
		}
	}, s.logger)
	if !stopped {
		return false, ErrShutdownAbandoned
	}
	return true, err
}

// streamLayer adapts the server port's Raft side to raft.StreamLayer.
type streamLayer struct{ *transport.RaftLayer }

func (l streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return l.DialRaft(string(addr), timeout)
}
