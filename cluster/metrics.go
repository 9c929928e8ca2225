package cluster

import (
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// emitMetrics publishes the node's state gauges through go-metrics (where
// raft and memberlist publish theirs) once a second; the process chooses
// the sink (the agent: Prometheus).
func (s *Server) emitMetrics() {
	labels := []metrics.Label{{Name: "node", Value: s.cfg.NodeID}}
	s.every(time.Second, func() bool {
		st := s.fsm.State()
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
