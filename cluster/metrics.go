package cluster

import (
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// Coverage gauges (plugreg_coverage_nodes): every coverageEvery, for at
// most maxCoverageTypes types (the first, sorted), so that the series stay
// bounded: three per type. Types are not bounded by the API; a registry
// with more types shows the first ones and logs that it cut the rest.
const (
	coverageEvery    = 5 * time.Second
	maxCoverageTypes = 1000
)

// emitMetrics publishes the node's state gauges through go-metrics (where
// raft and memberlist publish theirs) once a second; the process chooses
// the sink (the agent: Prometheus).
func (s *Server) emitMetrics() {
	labels := []metrics.Label{{Name: "node", Value: s.cfg.NodeID}}
	var lastCoverage time.Time
	cutLogged := false
	s.every(time.Second, func() bool {
		st := s.fsm.State()
		if time.Since(lastCoverage) >= coverageEvery {
			lastCoverage = time.Now()
			s.emitCoverage(st, labels[0], &cutLogged)
		}
		metrics.SetGaugeWithLabels([]string{"fsm", "applied_index"}, float32(st.Index()), labels)
		metrics.SetGaugeWithLabels([]string{"fsm", "instances"}, float32(st.Len()), labels)
		leader := float32(0)
		if s.IsLeader() {
			leader = 1
		}
		metrics.SetGaugeWithLabels([]string{"server", "is_leader"}, leader, labels)
		// 1 while the leader's guard holds reaping (reapbrakes.go); 0
		// on the other servers.
		paused := float32(0)
		if st, ok := s.ReapStatus(); ok && st.Paused {
			paused = 1
		}
		metrics.SetGaugeWithLabels([]string{"reap", "paused"}, paused, labels)
		// Leases: held by the leader's lessor (0 elsewhere), and the
		// expiries this server proposed and applied (counts since start).
		ls := s.LeaseStats()
		metrics.SetGaugeWithLabels([]string{"leases", "held"}, float32(ls.Leases), labels)
		metrics.SetGaugeWithLabels([]string{"leases", "expiry_entries"}, float32(ls.ExpiryEntries), labels)
		metrics.SetGaugeWithLabels([]string{"leases", "expired"}, float32(ls.Expired), labels)
		return true
	})
}

// emitCoverage sets plugreg_coverage_nodes{type,state} for each type of st
// (api.NewCoverage over every member, from this server's gossip view):
// each server emits its own view, labelled with its node, so that a
// dashboard reads any one server, not a sum.
// cutLogged: the cut was logged (once per process, not every period).
func (s *Server) emitCoverage(st *fsm.State, node metrics.Label, cutLogged *bool) {
	types := st.Types()
	if len(types) > maxCoverageTypes {
		if !*cutLogged {
			*cutLogged = true
			s.logger.Warn("coverage gauges cut to the first types", "types", len(types), "max", maxCoverageTypes)
		}
		types = types[:maxCoverageTypes]
	}
	var members []api.Member
	for _, m := range s.gossip.Members() {
		members = append(members, m.API("", false))
	}
	for _, t := range types {
		cov := api.NewCoverage(t, "", members, st.TypeInstances(t))
		for _, state := range api.CoverageStates {
			metrics.SetGaugeWithLabels([]string{"coverage", "nodes"}, float32(cov.Count(state)),
				[]metrics.Label{node, {Name: "type", Value: t}, {Name: "state", Value: state}})
		}
	}
}
