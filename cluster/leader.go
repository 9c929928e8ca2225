package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
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
		err := s.awaitFuture(s.raft.Barrier(s.cfg.ApplyTimeout))
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
		case status == StatusAlive:
			if !ok || string(srv.Address) != m.Meta.RaftAddr {
				s.logger.Info("adding voter", "id", m.Meta.ID, "addr", m.Meta.RaftAddr)
				if err := s.raft.AddVoter(raft.ServerID(m.Meta.ID), raft.ServerAddress(m.Meta.RaftAddr), 0, 0).Error(); err != nil {
					s.logger.Warn("add voter failed", "id", m.Meta.ID, "error", err)
				}
			}
		case status == StatusLeft:
			if ok && m.Meta.ID != s.cfg.NodeID {
				s.removeServer(m.Meta.ID, "left")
				voters--
			}
		case status == StatusFailed:
			if ok && s.cfg.DeadServerCleanup > 0 && now.Sub(m.Since) > s.cfg.DeadServerCleanup && voters-1 >= s.cfg.MinQuorum {
				s.removeServer(m.Meta.ID, "dead")
				voters--
			}
		}
		if m.Status == StatusAlive {
			delete(reaped, m.Name)
		}
		if m.Status != StatusAlive && s.cfg.NodeReapAfter > 0 && now.Sub(m.Since) > s.cfg.NodeReapAfter && !reaped[m.Name] {
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
	res, err := s.store.DeregisterNode(ctx, nodeID)
	if err != nil {
		s.logger.Warn("reap node failed", "dead_node", nodeID, "error", err)
		return false
	}
	s.logger.Info("reaped plugins of dead node", "dead_node", nodeID, "index", res.Index)
	return true
}
