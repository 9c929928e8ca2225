package telemetry

import (
	"testing"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// BenchmarkAddSample: what one raft timer costs the sink (raft emits a
// dozen per write on the leader).
func BenchmarkAddSample(b *testing.B) {
	s := NewSink()
	key := []string{"plugreg", "timer", "raft", "rpc", "appendEntries", "storeLogs"}
	b.ReportAllocs()
	for b.Loop() {
		s.AddSample(key, 0.2)
	}
}

func BenchmarkIncrCounterWithLabels(b *testing.B) {
	s := NewSink()
	key := []string{"plugreg", "counter", "raft", "replication", "appendEntries", "rpc"}
	labels := []metrics.Label{{Name: "peer_id", Value: "n2"}}
	b.ReportAllocs()
	for b.Loop() {
		s.IncrCounterWithLabels(key, 1, labels)
	}
}
