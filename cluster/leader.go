package cluster

import (
	"context"
	"fmt"
	"time"

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
		s.leaderReady.Store(false)
	}
	defer stopLeader()
	for {
		select {
		case <-s.ctx.Done():
			return
		case isLeader := <-s.leaderNotify:
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
// read-index reads are safe) and then reconciles membership until stop.
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
	s.leaderReady.Store(true)
	s.logger.Info("leadership established", "applied", s.AppliedIndex())
	defer s.leaderReady.Store(false)

	reaped := make(map[string]bool)
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		s.reconcile(stop, reaped)
		select {
		case <-stop:
			return
		case <-t.C:
		case <-s.gossip.Changed():
		}
	}
}

// reconcile brings the Raft configuration in line with the gossip pool:
// alive servers become voters, servers that left are removed, servers dead
// for longer than DeadServerCleanup are removed while enough voters remain,
// and the plugins of nodes dead for longer than NodeReapAfter are
// deregistered.
func (s *Server) reconcile(stop <-chan struct{}, reaped map[string]bool) {
	servers, err := s.RaftConfiguration()
	if err != nil {
		s.logger.Warn("reconcile: raft configuration", "error", err)
		return
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
	for _, m := range s.gossip.Members() {
		select {
		case <-stop:
			return
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
		if m.Status == gossip.StatusAlive {
			delete(reaped, m.Name)
		}
		if m.Status != gossip.StatusAlive && s.cfg.NodeReapAfter > 0 && now.Sub(m.Since) > s.cfg.NodeReapAfter && !reaped[m.Name] {
			if s.reapNode(m.Name) {
				reaped[m.Name] = true
			}
		}
	}
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
	if len(s.fsm.State().NodeInstances(nodeID)) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	res, err := s.deregisterNode(ctx, nodeID)
	if err != nil {
		s.logger.Warn("reap node failed", "dead_node", nodeID, "error", err)
		return false
	}
	s.logger.Info("reaped plugins of dead node", "dead_node", nodeID, "index", res.Index)
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
