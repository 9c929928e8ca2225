package cluster

import (
	"context"
	"fmt"
	"sort"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/cluster/raftx"
	"github.com/plugreg/plugreg/gossip"
)

// monitorLeadership runs the leader's duties while this node leads.
func (s *Server) monitorLeadership() {
	var (
		stop chan struct{}
		done chan struct{}
	)
	stopLeader := func() {
		if stop != nil {
			close(stop)
			<-done
			stop, done = nil, nil
		}
		s.lead.ready.Store(false)
	}
	defer stopLeader()
	for {
		select {
		case <-s.ctx.Done():
			return
		case isLeader := <-s.lead.notify:
			if isLeader && stop == nil {
				stop, done = make(chan struct{}), make(chan struct{})
				go func(stop, done chan struct{}) {
					defer close(done)
					s.leaderLoop(stop)
				}(stop, done)
			} else if !isLeader {
				stopLeader()
			}
		}
	}
}

// leaderLoop establishes leadership (a barrier: everything committed in
// earlier terms is applied here, and the new term has committed an entry, so
// read-index reads are safe), takes over the leases, and then reconciles
// membership until stop.
func (s *Server) leaderLoop(stop <-chan struct{}) {
	for {
		err := raftx.Await(s.raft.Barrier(s.cfg.ApplyTimeout), s.raftGone)
		if err == nil {
			break
		}
		s.logger.Warn("leader barrier failed", "error", err)
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.lead.ready.Store(true)
	s.logger.Info("leadership established", "applied", s.AppliedIndex())
	defer s.lead.ready.Store(false)
	// The leases of this term, each a full TTL from now (leases.go).
	endLeases := s.startLeases(stop)
	defer endLeases()
	checksDone := make(chan struct{})
	go func() {
		defer close(checksDone)
		s.proposeStateChecks(stop)
	}()
	defer func() { <-checksDone }()
	if s.cfg.ACLEnabled && s.cfg.ACLInitialManagementToken != "" {
		bootstrapped := make(chan struct{})
		go func() {
			defer close(bootstrapped)
			s.bootstrapInitialToken(stop)
		}()
		defer func() { <-bootstrapped }()
	}

	brakes := newReapBrakes(s.cfg.ReapBrakes, s.logger)
	s.lead.brakes.Store(brakes)
	defer s.lead.brakes.Store(nil)
	reaped := make(map[string]bool)
	marks := nodeMarksOf(s.fsm.State())
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		// Nodes the reap rate put off are due again when the next token
		// is, not a ReconcileInterval later: the rate is the rate.
		var putOff <-chan time.Time
		if wait := s.reconcile(stop, reaped, marks, brakes); wait > 0 {
			putOff = time.After(wait)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		case <-s.gossip.Changed():
		case <-brakes.kick:
		case <-putOff:
		}
	}
}

// reconcile brings the Raft configuration in line with the gossip pool:
// alive servers become voters, servers that left are removed, servers dead
// for longer than DeadServerCleanup are removed while enough voters remain,
// the instances of nodes not alive are marked suspect (markNodes), and the
// plugins of nodes dead for longer than NodeReapAfter are
// deregistered as the brakes allow (reapDead). It returns how soon nodes
// the reap rate put off are due (0: none were).
func (s *Server) reconcile(stop <-chan struct{}, reaped map[string]bool, marks nodeMarks, brakes *reapBrakes) time.Duration {
	servers, err := s.RaftConfiguration()
	if err != nil {
		s.logger.Warn("reconcile: raft configuration", "error", err)
		return 0
	}
	inConfig := make(map[string]raft.Server, len(servers))
	voters := 0
	for _, srv := range servers {
		inConfig[string(srv.ID)] = srv
		if srv.Suffrage == raft.Voter {
			voters++
		}
	}
	now := time.Now()
	members := s.gossip.Members()
	for _, m := range members {
		select {
		case <-stop:
			return 0
		default:
		}
		srv, ok := inConfig[m.Meta.ID]
		switch status := m.Status; {
		case !m.Meta.IsServer():
			// A client agent is never a voter; it is only reaped.
		case status == gossip.StatusAlive:
			if !ok || string(srv.Address) != m.Meta.RaftAddr {
				if !s.proofs.due(m.Meta) {
					break // refused lately: not asked again on every pass
				}
				if err := s.proveServer(m.Meta); err != nil {
					if s.proofs.refused(m.Meta) {
						s.logger.Warn("not adding a gossip member as a voter: it did not prove to be that server", "id", m.Meta.ID, "addr", m.Meta.RaftAddr, "member", m.Name, "error", err)
					}
					break
				}
				s.proofs.proved(m.Meta)
				s.logger.Info("adding voter", "id", m.Meta.ID, "addr", m.Meta.RaftAddr)
				if err := s.raft.AddVoter(raft.ServerID(m.Meta.ID), raft.ServerAddress(m.Meta.RaftAddr), 0, 0).Error(); err != nil {
					s.logger.Warn("add voter failed", "id", m.Meta.ID, "error", err)
				}
			}
		case status == gossip.StatusLeft:
			if ok && m.Meta.ID != s.cfg.NodeID {
				s.removeServer(m.Meta.ID, "left")
				voters--
			}
		case status == gossip.StatusFailed:
			if ok && s.cfg.DeadServerCleanup > 0 && now.Sub(m.Since) > s.cfg.DeadServerCleanup && voters-1 >= s.cfg.MinQuorum {
				s.removeServer(m.Meta.ID, "dead")
				voters--
			}
		}
	}
	s.markNodes(stop, members, marks)
	return s.reapDead(stop, members, reaped, brakes)
}

// reapDead deregisters the plugins of the nodes gone for longer than
// NodeReapAfter, longest gone first, as the brakes allow: the guard holds
// failed nodes while too many client agents are failed at once (it does
// not hold nodes that left: they said so), and the rate spaces the rest.
// reaped holds the nodes done with in this leadership; one that is alive
// again leaves it. It returns how soon the nodes the rate put off are due
// (0: none were).
func (s *Server) reapDead(stop <-chan struct{}, members []gossip.Member, reaped map[string]bool, brakes *reapBrakes) time.Duration {
	pruneReaped(reaped, members)
	if s.cfg.NodeReapAfter < 0 {
		return 0
	}
	st := s.fsm.State()
	hasPlugins := st.HasNodeInstances
	now := time.Now()
	failed, clients := census(members, hasPlugins)
	hold := brakes.observe(failed, clients, now)
	for _, m := range dueForReaping(members, reaped, now, s.cfg.NodeReapAfter, brakes.releasedAt) {
		select {
		case <-stop:
			return 0
		default:
		}
		switch {
		case !hasPlugins(m.Name):
			reaped[m.Name] = true // nothing to deregister: no entry, no token
		case hold && m.Status == gossip.StatusFailed:
			// Held until the guard releases, or an operator resumes.
		default:
			if wait := brakes.bucket.take(time.Now()); wait > 0 {
				return wait
			}
			if s.reapNode(m.Name) {
				reaped[m.Name] = true
			}
		}
	}
	return 0
}

// pruneReaped drops from reaped the nodes alive again and those gossip
// forgot (gossip.Config.ForgetAfter), so that it never holds more than
// the members do.
func pruneReaped(reaped map[string]bool, members []gossip.Member) {
	if len(reaped) == 0 {
		return
	}
	gone := make(map[string]bool, len(reaped))
	for _, m := range members {
		if m.Status != gossip.StatusAlive && reaped[m.Name] {
			gone[m.Name] = true
		}
	}
	for name := range reaped {
		if !gone[name] {
			delete(reaped, name)
		}
	}
}

// dueForReaping returns the members not alive for longer than after that
// are not done with yet, longest gone first. A failed member's time
// counts from released at the earliest: when the guard last released by
// itself (reapBrakes.releasedAt).
func dueForReaping(members []gossip.Member, reaped map[string]bool, now time.Time, after time.Duration, released time.Time) []gossip.Member {
	gone := func(m gossip.Member) time.Time {
		if m.Status == gossip.StatusFailed && m.Since.Before(released) {
			return released
		}
		return m.Since
	}
	var due []gossip.Member
	for _, m := range members {
		if m.Status != gossip.StatusAlive && now.Sub(gone(m)) > after && !reaped[m.Name] {
			due = append(due, m)
		}
	}
	sort.SliceStable(due, func(i, j int) bool { return due[i].Since.Before(due[j].Since) })
	return due
}

func (s *Server) removeServer(id, why string) {
	s.logger.Info("removing server", "id", id, "reason", why)
	if err := s.raft.RemoveServer(raft.ServerID(id), 0, 0).Error(); err != nil {
		s.logger.Warn("remove server failed", "id", id, "error", err)
	}
}

// reapNode deregisters every plugin of a node that has been gone too long.
// It reports whether the node is done with (nothing left, or deregistered).
func (s *Server) reapNode(nodeID string) bool {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	res, err := s.deregisterNode(ctx, nodeID)
	if err != nil {
		s.logger.Warn("reap node failed", "dead_node", nodeID, "error", err)
		return false
	}
	s.logger.Info("reaped plugins of dead node", "dead_node", nodeID, "index", res.Index)
	metrics.IncrCounterWithLabels([]string{"reap", "nodes"}, 1, []metrics.Label{{Name: "node", Value: s.cfg.NodeID}})
	return true
}

// proveServer checks a gossip member's claim to be the server meta.ID at
// meta.RaftAddr before the leader gives it a voter's slot: every agent
// with the gossip key, client agents included, may claim anything in its
// metadata. The leader asks the address itself for its node ID (RaftStats)
// over the server port: with -verify-server-hostname the connection
// verifies that the address holds a server's certificate, and the answer
// must name meta.ID. Its own ID is never moved to another address.
func (s *Server) proveServer(meta gossip.Meta) error {
	if meta.ID == s.cfg.NodeID {
		if meta.RaftAddr != s.raftAddr {
			return fmt.Errorf("claims this server's node ID %q with another address", meta.ID)
		}
		return nil
	}
	st, err := s.statsOf(s.ctx, raft.Server{ID: raft.ServerID(meta.ID), Address: raft.ServerAddress(meta.RaftAddr)})
	if err != nil {
		return fmt.Errorf("its server port: %w", err)
	}
	if st.ID != meta.ID {
		return fmt.Errorf("its server port answers as node %q", st.ID)
	}
	return nil
}
