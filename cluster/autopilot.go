package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
	applied := s.AppliedIndex()
	failures, failure := s.restores.report(applied, time.Now())
	return api.RaftStats{ID: s.cfg.NodeID, Leader: s.IsLeader(), LastContact: int64(s.LastContact()), Term: s.raft.CurrentTerm(),
		LastTerm: lastTerm, LastIndex: s.raft.LastIndex(), AppliedIndex: applied, RestoreFailures: failures, RestoreError: failure}
}

// lastContactThreshold: a follower that has not heard from the leader for
// this long is unhealthy (it is about to call an election).
func (s *Server) lastContactThreshold() time.Duration {
	if s.cfg.HeartbeatTimeout > 0 {
		return s.cfg.HeartbeatTimeout
	}
	return raft.DefaultConfig().HeartbeatTimeout
}

// statsOf returns srv's figures: this server's own, or srv's answer to
// rpcRaftStats within 2 s.
func (s *Server) statsOf(ctx context.Context, srv raft.Server) (*api.RaftStats, error) {
	if string(srv.ID) == s.cfg.NodeID {
		st := s.raftStats()
		return &st, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var st api.RaftStats
	if err := s.pool.Call(ctx, string(srv.Address), rpcRaftStats, struct{}{}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// AutopilotHealth asks every server of the Raft configuration for its
// figures (in parallel, 2 s each) and judges each as Consul's autopilot
// does, and also by whether the leader can replicate to it at all; any
// server answers it, the leader's figures are the reference.
func (b *Backend) AutopilotHealth(ctx context.Context) (api.AutopilotHealth, error) {
	s := b.s
	servers, err := s.RaftConfiguration()
	if err != nil {
		return api.AutopilotHealth{}, apiError(err)
	}
	gossip := map[string]string{}
	for _, m := range b.Members(ctx) {
		gossip[m.Name] = m.Status
	}
	stats := make([]*api.RaftStats, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i], errs[i] = s.statsOf(ctx, srv)
		}()
	}
	wg.Wait()
	out := api.AutopilotHealth{Healthy: true, Leader: s.LeaderID()}
	var leader, after *api.RaftStats
	for i, st := range stats {
		if st != nil && st.Leader {
			leader = st
			// The leader's last index once more, now that every other
			// server has answered: taken in the same round, a follower
			// may have applied entries the leader appended after its
			// figures were taken, and look ahead of it. Taken after, no
			// follower that takes the leader's entries is ahead of it.
			if a, err := s.statsOf(ctx, servers[i]); err == nil && a.Leader && a.Term == st.Term {
				after = a
			}
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
			h.Reason = unhealthyReason(st, leader, after, h.SerfStatus, h.IndexLag, s.lastContactThreshold())
		} else {
			h.Error = errs[i].Error()
			h.Reason = "it did not answer: " + h.Error
		}
		h.Healthy = h.Reason == ""
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

// unhealthyReason says why the server whose figures are st is unhealthy,
// "" when it is healthy. leader is the leader's figures of the same round
// (nil: no server leads), after the leader's taken once every server had
// answered (nil: not known), lag st's distance behind the leader's log.
//
// Consul's rules (gossip, contact, term, lag) do not see a follower that
// the leader cannot replicate to: it hears the leader's heartbeats, which
// carry no entries, in the leader's term, and while its log is not
// behind the leader's it shows no lag. Two signs of one do not depend on
// timing, so they cannot flag a follower that is merely slow:
//   - its applied state is ahead of the leader's log. Every entry a
//     server applies is committed, so in the leader's log: a follower
//     ahead holds entries the leader never had (an outage recovery kept
//     its uncommitted tail) and refuses the leader's snapshots as older
//     than its state.
//   - it failed to restore the leader's snapshots again and again, its
//     state unchanged since (restoreFailures): that also covers such a
//     follower once the leader's log has passed its state, until the
//     leader snapshots past it.
func unhealthyReason(st, leader, after *api.RaftStats, serf string, lag uint64, contactThreshold time.Duration) string {
	if leader == nil {
		return "no server leads"
	}
	var why []string
	if serf != "alive" {
		why = append(why, "gossip has it "+serf)
	}
	if st.Term != leader.Term {
		why = append(why, fmt.Sprintf("in term %d, the leader in %d", st.Term, leader.Term))
	}
	if lag > api.MaxTrailingLogs {
		why = append(why, fmt.Sprintf("%d entries behind the leader's log (at most %d)", lag, api.MaxTrailingLogs))
	}
	if !st.Leader {
		switch {
		case st.LastContact < 0:
			why = append(why, "it never heard from the leader")
		case time.Duration(st.LastContact) >= contactThreshold:
			why = append(why, fmt.Sprintf("last heard from the leader %v ago (at most %v)", time.Duration(st.LastContact).Round(time.Millisecond), contactThreshold))
		}
		if after != nil && st.AppliedIndex > after.LastIndex {
			why = append(why, fmt.Sprintf("its applied state (index %d) is ahead of the leader's log (last index %d): it holds entries the leader never had and cannot follow it",
				st.AppliedIndex, after.LastIndex))
		}
		if st.RestoreFailures >= minRestoreFailures {
			why = append(why, fmt.Sprintf("it failed to install the leader's snapshot %d times, its state unchanged since (last: %s)", st.RestoreFailures, st.RestoreError))
		}
	}
	return strings.Join(why, "; ")
}

// minRestoreFailures: one failed restore may be a stale install that
// raced normal replication (see fsm.FSM.Restore), after which the
// follower takes entries again; a leader that cannot replicate to a
// follower sends its snapshot again and again.
const minRestoreFailures = 2

// restoreFailureMemory is how long a failed restore counts. A leader
// retries a rejected snapshot after a backoff of at most 10.24 s
// (hashicorp/raft v1.7.3: 10 ms, doubled per failure, at most 2^10
// times), so a follower it cannot replicate to fails again well within
// it; past it, the failures were a passing thing.
const restoreFailureMemory = time.Minute

// restoreFailures remembers the FSM's failed restores. On a running
// server raft restores a snapshot only when the leader installs one, and
// a follower whose FSM refuses it takes nothing from the leader: raft
// reports the rejection only in the leader's log and keeps no figure of
// it that Stats shows, so the follower counts them itself.
type restoreFailures struct {
	mu      sync.Mutex
	n       int       // failures since the state last changed
	err     error     // the last failure's
	at      time.Time // the last failure's
	applied uint64    // the FSM's index after the last failure
}

// record notes a restore's outcome; applied is the FSM's index after it.
func (r *restoreFailures) record(err error, applied uint64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil || applied != r.applied {
		r.n = 0
	}
	if err != nil {
		r.n++
		r.err, r.at, r.applied = err, now, applied
	}
}

// report returns the failures that still count (their number and the
// last one's error): none once the state has changed since the last one
// (the server took something: a snapshot, entries) or past
// restoreFailureMemory.
func (r *restoreFailures) report(applied uint64, now time.Time) (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 || applied != r.applied || now.Sub(r.at) > restoreFailureMemory {
		return 0, ""
	}
	return r.n, r.err.Error()
}

// recordRestore records the outcome of a restore in s.restores (the
// machine's onRestore).
func (s *Server) recordRestore(err error) {
	s.restores.record(err, s.AppliedIndex(), time.Now())
}
