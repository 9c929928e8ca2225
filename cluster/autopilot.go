package cluster

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// rpcRaftStats: {} -> api.RaftStats, a server's figures for autopilot
// health (Consul's Status.RaftStats).
const rpcRaftStats = "RaftStats"

// raftStats is what this server says of itself.
func (s *Server) raftStats() api.RaftStats {
	st := s.raft.Stats()
	lastTerm, _ := strconv.ParseUint(st["last_log_term"], 10, 64)
	return api.RaftStats{ID: s.cfg.NodeID, Leader: s.IsLeader(), LastContact: int64(s.LastContact()), Term: s.raft.CurrentTerm(),
		LastTerm: lastTerm, LastIndex: s.raft.LastIndex(), AppliedIndex: s.AppliedIndex()}
}

// lastContactThreshold: a follower that has not heard from the leader for
// this long is unhealthy (it is about to call an election).
func (s *Server) lastContactThreshold() time.Duration {
	if s.cfg.HeartbeatTimeout > 0 {
		return s.cfg.HeartbeatTimeout
	}
	return raft.DefaultConfig().HeartbeatTimeout
}

// AutopilotHealth asks every server of the Raft configuration for its
// figures (in parallel, 2 s each) and judges each as Consul's autopilot
// does; any server answers it, the leader's figures are the reference.
func (b *Backend) AutopilotHealth(ctx context.Context) (api.AutopilotHealth, error) {
	s := b.s
	servers, err := s.RaftConfiguration()
	if err != nil {
		return api.AutopilotHealth{}, apiError(err)
	}
	gossip := map[string]string{}
	for _, m := range b.Members() {
		gossip[m.Name] = m.Status
	}
	stats := make([]*api.RaftStats, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		if string(srv.ID) == s.cfg.NodeID {
			st := s.raftStats()
			stats[i] = &st
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var st api.RaftStats
			if err := s.pool.Call(cctx, string(srv.Address), rpcRaftStats, struct{}{}, &st); err != nil {
				errs[i] = err
				return
			}
			stats[i] = &st
		}()
	}
	wg.Wait()
	out := api.AutopilotHealth{Healthy: true, Leader: s.LeaderID()}
	var leader *api.RaftStats
	for _, st := range stats {
		if st != nil && st.Leader {
			leader = st
		}
	}
	voters, healthyVoters := 0, 0
	for i, srv := range servers {
		h := api.ServerHealth{ID: string(srv.ID), Name: string(srv.ID), Address: string(srv.Address), Voter: srv.Suffrage == raft.Voter,
			SerfStatus: gossip[string(srv.ID)]}
		if h.SerfStatus == "" {
			h.SerfStatus = "unknown"
		}
		if st := stats[i]; st != nil {
			h.Leader = st.Leader
			h.LastTerm, h.LastIndex, h.AppliedIndex = st.LastTerm, st.LastIndex, st.AppliedIndex
			if st.LastContact >= 0 {
				h.LastContact = time.Duration(st.LastContact).Round(time.Millisecond).String()
			}
			if leader != nil && leader.LastIndex > st.LastIndex {
				h.IndexLag = leader.LastIndex - st.LastIndex
			}
			h.Healthy = leader != nil && h.SerfStatus == "alive" && st.Term == leader.Term && h.IndexLag <= api.MaxTrailingLogs &&
				(st.Leader || st.LastContact >= 0 && time.Duration(st.LastContact) < s.lastContactThreshold())
		} else {
			h.Error = errs[i].Error()
		}
		if h.Voter {
			voters++
			if h.Healthy {
				healthyVoters++
			}
		}
		out.Healthy = out.Healthy && h.Healthy
		out.Servers = append(out.Servers, h)
	}
	out.FailureTolerance = max(0, healthyVoters-(voters/2+1))
	return out, nil
}
