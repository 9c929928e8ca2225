package cluster

import (
	"slices"
	"strings"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/telemetry"
)

// Coverage gauges (plugreg_coverage_nodes): every coverageEvery, for at
// most maxCoverageTypes types (the first, sorted), so that the series stay
// bounded: three per type. Types are not bounded by the API; a registry
// with more types shows the first ones and logs that it cut the rest.
//
// Computing them walks every instance (api.NewCoverage per type): at a
// million instances a quarter of a second per pass and per server, with
// its garbage, which was 13 % of the servers' CPU in the bench's scale
// run. So a pass runs only when the state or the members changed since
// the last one, and no sooner after it than coverageCost times its own
// duration (at most 1/coverageCost of a core); in between, the last
// counts are set again every coverageEvery (telemetry's sink keeps a
// series forever; go-metrics' own dropped it a minute after it was last
// set, and the setting again stays harmless).
const (
	coverageEvery    = 5 * time.Second
	coverageCost     = 50
	maxCoverageTypes = 1000
)

// coverageGauges is the last coverage pass, owned by emitMetrics.
type coverageGauges struct {
	emitAt, passAt time.Time // the next emission; the earliest next pass
	index          uint64    // the state's index at the last pass
	members        []api.Member
	counts         []typeCoverage // nil: no pass yet
	cutLogged      bool           // the cut to maxCoverageTypes was logged
	emitted        []string       // the types of the last emission
}

type typeCoverage struct {
	typ    string
	counts []int // one per api.CoverageStates
}

// emitMetrics publishes the node's state gauges through go-metrics (where
// raft and memberlist publish theirs) once a second; the process chooses
// the sink (the agent: Prometheus).
func (s *Server) emitMetrics() {
	labels := []metrics.Label{{Name: "node", Value: s.cfg.NodeID}}
	var cov coverageGauges
	s.every(time.Second, func() bool {
		st := s.fsm.State()
		if now := time.Now(); !now.Before(cov.emitAt) {
			cov.emitAt = now.Add(coverageEvery)
			s.updateCoverage(&cov, st, now)
			cov.emit(labels[0])
		}
		// float64: go-metrics' float32 gauges are exact only up to 2^24.
		telemetry.SetGauge64([]string{"fsm", "applied_index"}, float64(st.Index()), labels...)
		metrics.SetGaugeWithLabels([]string{"fsm", "instances"}, float32(st.Len()), labels)
		// The registry's own counts (registry.Stats): changes applied
		// here by kind, the subscriptions running, what they delivered.
		hs := s.hub.Stats()
		for ch, n := range hs.Changes {
			telemetry.SetCounter64([]string{"registry", "changes"}, float64(n), labels[0],
				metrics.Label{Name: "kind", Value: string(ch.Kind)}, metrics.Label{Name: "type", Value: ch.Type})
		}
		telemetry.SetGauge64([]string{"registry", "watchers"}, float64(hs.Watchers), labels...)
		telemetry.SetCounter64([]string{"registry", "events_delivered"}, float64(hs.Delivered), labels...)
		telemetry.SetCounter64([]string{"registry", "resets"}, float64(hs.Resets), labels...)
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

// updateCoverage makes a new pass (api.NewCoverage over every member,
// from this server's gossip view) if st or the members changed since the
// last one and the last one's cost allows it.
func (s *Server) updateCoverage(cov *coverageGauges, st *fsm.State, now time.Time) {
	var members []api.Member
	for _, m := range s.gossip.Members() {
		members = append(members, m.API("", false))
	}
	// By name: gossip reorders its members as it probes them.
	slices.SortFunc(members, func(a, b api.Member) int { return strings.Compare(a.Name, b.Name) })
	if cov.counts != nil && (now.Before(cov.passAt) || st.Index() == cov.index && slices.Equal(members, cov.members)) {
		return
	}
	types := st.Types()
	if len(types) > maxCoverageTypes {
		if !cov.cutLogged {
			cov.cutLogged = true
			s.logger.Warn("coverage gauges cut to the first types", "types", len(types), "max", maxCoverageTypes)
		}
		types = types[:maxCoverageTypes]
	}
	counts := make([]typeCoverage, 0, len(types))
	for _, t := range types {
		c := api.NewCoverage(t, "", members, st.TypeInstances(t))
		tc := typeCoverage{typ: t, counts: make([]int, len(api.CoverageStates))}
		for i, state := range api.CoverageStates {
			tc.counts[i] = c.Count(state)
		}
		counts = append(counts, tc)
	}
	cov.counts, cov.index, cov.members = counts, st.Index(), members
	cov.passAt = now.Add(coverageCost * time.Since(now))
}

// emit sets plugreg_coverage_nodes{node,type,state} from the last pass:
// each server emits its own view, labelled with its node, so that a
// dashboard reads any one server, not a sum.
//
// The series of a type that is gone since the last emission are removed
// (telemetry keeps every series until told otherwise): a dashboard must
// not go on showing a removed type's last gaps.
func (cov *coverageGauges) emit(node metrics.Label) {
	var types []string
	for _, tc := range cov.counts {
		types = append(types, tc.typ)
		for i, state := range api.CoverageStates {
			metrics.SetGaugeWithLabels([]string{"coverage", "nodes"}, float32(tc.counts[i]),
				[]metrics.Label{node, {Name: "type", Value: tc.typ}, {Name: "state", Value: state}})
		}
	}
	for _, typ := range cov.emitted {
		if !slices.Contains(types, typ) {
			for _, state := range api.CoverageStates {
				telemetry.Forget([]string{"coverage", "nodes"}, node, metrics.Label{Name: "type", Value: typ}, metrics.Label{Name: "state", Value: state})
			}
		}
	}
	cov.emitted = types
}
