package telemetry

import (
	"bytes"
	"strings"
	"testing"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// gather scrapes s as Prometheus would and returns the families by name.
func gather(t *testing.T, s *Sink) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func l(name, value string) metrics.Label { return metrics.Label{Name: name, Value: value} }

// What go-metrics hands the sink (with EnableTypePrefix and the service
// name, as Configure sets it up) and the series that come out.
func TestSinkNamesAndKinds(t *testing.T) {
	s := NewSink()
	s.IncrCounter([]string{"plugreg", "counter", "raft", "state", "leader"}, 1)
	s.IncrCounter([]string{"plugreg", "counter", "raft", "state", "leader"}, 2)
	s.AddSample([]string{"plugreg", "timer", "raft", "commitTime"}, 0.4)  // 0.4 ms
	s.AddSample([]string{"plugreg", "timer", "raft", "commitTime"}, 1500) // 1.5 s
	s.AddSample([]string{"plugreg", "sample", "raft", "leader", "lastContact"}, 20)
	s.AddSample([]string{"plugreg", "sample", "raft", "fsm", "applyBatchNum"}, 3)
	s.AddSample([]string{"plugreg", "sample", "raft", "thread", "main", "saturation"}, 0.5)
	s.SetGaugeWithLabels([]string{"plugreg", "gauge", "reap", "paused"}, 1, []metrics.Label{l("node", "n1")})
	s.EmitKey([]string{"plugreg", "kv", "x"}, 7)
	got := gather(t, s)
	cases := []struct {
		name string
		typ  dto.MetricType
		// value: a gauge's or counter's; a histogram's sum
		value float64
		count uint64 // histograms
	}{
		{"plugreg_raft_state_leader_total", dto.MetricType_COUNTER, 3, 0},
		{"plugreg_raft_commit_time_seconds", dto.MetricType_HISTOGRAM, 1.5004, 2},
		{"plugreg_raft_leader_last_contact_seconds", dto.MetricType_HISTOGRAM, 0.02, 1},
		{"plugreg_raft_fsm_apply_batch_num", dto.MetricType_HISTOGRAM, 3, 1},
		{"plugreg_raft_thread_main_saturation_ratio", dto.MetricType_HISTOGRAM, 0.5, 1},
		{"plugreg_reap_paused", dto.MetricType_GAUGE, 1, 0},
		{"plugreg_x", dto.MetricType_GAUGE, 7, 0},
	}
	for _, tc := range cases {
		mf := got[tc.name]
		if mf == nil {
			t.Errorf("%s: missing; have %v", tc.name, names(got))
			continue
		}
		if mf.GetType() != tc.typ {
			t.Errorf("%s: type %v, want %v", tc.name, mf.GetType(), tc.typ)
			continue
		}
		m := mf.GetMetric()[0]
		var v float64
		switch tc.typ {
		case dto.MetricType_COUNTER:
			v = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			v = m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			v = m.GetHistogram().GetSampleSum()
			if m.GetHistogram().GetSampleCount() != tc.count {
				t.Errorf("%s: count %d, want %d", tc.name, m.GetHistogram().GetSampleCount(), tc.count)
			}
		}
		if d := v - tc.value; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: %v, want %v", tc.name, v, tc.value)
		}
	}
	// The timer's buckets are seconds: 0.4 ms falls in le=0.0005, 1.5 s
	// in le=2.5.
	h := got["plugreg_raft_commit_time_seconds"].GetMetric()[0].GetHistogram()
	for _, b := range h.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= 0.0005 {
			want = 1
		}
		if b.GetUpperBound() >= 2.5 {
			want = 2
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("commit time bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
}

// A float64 gauge holds a Raft index past float32's 2^24 exactly.
func TestSetGauge64IsExact(t *testing.T) {
	s := NewSink()
	const index = 1<<24 + 1
	s.SetGauge64([]string{"fsm", "applied_index"}, index, l("node", "n1"))
	s.SetGaugeWithLabels([]string{"plugreg", "gauge", "fsm", "applied_index_f32"}, index, nil)
	got := gather(t, s)
	if v := got["plugreg_fsm_applied_index"].GetMetric()[0].GetGauge().GetValue(); v != index {
		t.Fatalf("SetGauge64: %v, want %d", v, index)
	}
	// What a float32 gauge makes of it (why SetGauge64 exists).
	if v := got["plugreg_fsm_applied_index_f32"].GetMetric()[0].GetGauge().GetValue(); v == index {
		t.Fatal("a float32 gauge held 2^24+1: the case above proves nothing")
	}
}

// go-metrics callers do not always pass the same labels for a key; the
// family still gathers (Prometheus refuses a family whose series have
// different label names), the missing label empty.
func TestSinkPadsLabels(t *testing.T) {
	s := NewSink()
	key := []string{"plugreg", "counter", "raft", "replication", "appendEntries", "rpc"}
	s.IncrCounterWithLabels(key, 1, []metrics.Label{l("peer_id", "n2")})
	s.IncrCounter(key, 1)
	s.IncrCounterWithLabels(key, 1, []metrics.Label{l("peer_id", "n3"), l("zone", "a")})
	mf := gather(t, s)["plugreg_raft_replication_append_entries_rpc_total"]
	if mf == nil || len(mf.GetMetric()) != 3 {
		t.Fatalf("family %v", mf)
	}
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != 2 {
			t.Errorf("series %v: want both label names", m.GetLabel())
		}
	}
}

// Nothing is ever dropped: a series set once is in every later scrape
// (go-metrics' own sink dropped it a minute after it last moved; this
// sink keeps no time at all).
func TestSinkKeepsEverySeries(t *testing.T) {
	s := NewSink()
	s.IncrCounter([]string{"plugreg", "counter", "raft", "state", "leader"}, 1)
	for range 3 {
		if gather(t, s)["plugreg_raft_state_leader_total"] == nil {
			t.Fatal("the counter is gone")
		}
	}
}

// Every series the sink makes passes Prometheus' own lint (promlint, what
// `promtool check metrics` runs), for every kind of key raft, memberlist
// and plugreg emit.
func TestSinkPassesPromlint(t *testing.T) {
	s := NewSink()
	s.IncrCounterWithLabels([]string{"plugreg", "counter", "http", "limited"}, 1, []metrics.Label{l("limit", "streams")})
	s.AddSample([]string{"plugreg", "timer", "raft", "rpc", "appendEntries", "storeLogs"}, 0.2)
	s.AddSampleWithLabels([]string{"plugreg", "timer", "raft", "net", "rpcDecode"}, 0.1, []metrics.Label{l("rpcType", "AppendEntries")})
	s.AddSampleWithLabels([]string{"plugreg", "sample", "memberlist", "size", "remote"}, 4096, []metrics.Label{l("node", "n1")})
	s.AddSampleWithLabels([]string{"plugreg", "sample", "memberlist", "queue", "broadcasts"}, 2, nil)
	s.SetGaugeWithLabels([]string{"plugreg", "gauge", "coverage", "nodes"}, 3, []metrics.Label{l("type", "csi"), l("state", "missing")})
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if err := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain)).Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := promlint.New(&buf).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func names(m map[string]*dto.MetricFamily) string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return strings.Join(out, " ")
}

// Forget removes one series and leaves the family's others.
func TestSinkForget(t *testing.T) {
	s := NewSink()
	key := []string{"coverage", "nodes"}
	s.SetGaugeWithLabels(append([]string{"plugreg", "gauge"}, key...), 2, []metrics.Label{l("type", "csi")})
	s.SetGaugeWithLabels(append([]string{"plugreg", "gauge"}, key...), 1, []metrics.Label{l("type", "gone")})
	s.Forget(key, l("type", "gone"))
	mf := gather(t, s)["plugreg_coverage_nodes"]
	if mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetLabel()[0].GetValue() != "csi" {
		t.Fatalf("after Forget: %v", mf)
	}
}
