// Package telemetry is what plugreg tells about itself: its metrics, in
// Prometheus' conventions.
//
// raft, memberlist and plugreg all emit through go-metrics (armon's, via
// hashicorp/go-metrics/compat). Its own Prometheus sink breaks the
// conventions and loses data: it drops a series a minute after it last
// moved (go-metrics 119: a counter of leader changes vanished), stores
// every value as a float32 (an index past 2^24 is wrong), reports timers as
// millisecond summaries under camelCase names and counters without
// "_total". Sink replaces it: a go-metrics MetricSink that is also a
// prometheus.Collector, and that
//
//   - never drops a series by itself (a counter or gauge keeps its last
//     value); the emitter of a gauge whose subject may vanish removes its
//     series (Forget), as the coverage gauge does for a type gone;
//   - names every series in snake_case under "plugreg_", counters with
//     "_total", timers as histograms in seconds with "_seconds";
//   - keeps values as float64 (SetGauge64 for values past float32's
//     precision, such as Raft indexes);
//   - writes label names in snake_case too;
//   - pads a family's series to one set of label names (a missing label
//     is the empty string, which Prometheus reads as absent), because
//     go-metrics callers do not always pass the same labels for one key.
//
// It needs go-metrics configured with EnableTypePrefix (Configure does it):
// the type word in each key is how a sink tells a timer (milliseconds) from
// another sample.
package telemetry

import (
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the first word of every series name.
const Namespace = "plugreg"

type kind uint8

const (
	gaugeKind kind = iota
	counterKind
	histogramKind
)

// Sink is a go-metrics MetricSink and a prometheus.Collector (unchecked:
// its series appear as they are first emitted). Safe for concurrent use.
type Sink struct {
	mu       sync.Mutex
	families map[string]*family
}

type family struct {
	name, help string
	kind       kind
	buckets    []float64 // histograms
	labels     []string  // the union of its series' label names, sorted
	series     map[string]*series
}

type series struct {
	labels map[string]string
	value  float64 // gauge or counter
	// histogram
	count   uint64
	sum     float64
	buckets []uint64 // cumulative at Collect; per bucket here
}

// NewSink returns an empty Sink.
func NewSink() *Sink { return &Sink{families: map[string]*family{}} }

var _ metrics.MetricSink = (*Sink)(nil)

// SetGauge64 sets a gauge with float64 precision (go-metrics' gauges are
// float32: exact only up to 2^24). key is without the namespace, as a
// go-metrics key: {"fsm", "applied_index"}.
func (s *Sink) SetGauge64(key []string, val float64, labels ...metrics.Label) {
	s.observe(gaugeKind, seriesName(key), nil, val, labels, false)
}

// SetCounter64 sets a counter to total, a count its owner keeps itself
// (an atomic on a hot path, read once a second): "_total" is added to
// key's name. total must never go down while the process lives.
func (s *Sink) SetCounter64(key []string, total float64, labels ...metrics.Label) {
	s.observe(counterKind, seriesName(key)+"_total", nil, total, labels, true)
}

// Forget removes the gauge series of key (without namespace) and labels:
// for a series whose subject is gone (a plugin type nobody registers any
// more), which would otherwise keep its last value forever. Prometheus
// marks it stale at its next scrape.
func (s *Sink) Forget(key []string, labels ...metrics.Label) {
	name := seriesName(key)
	k := seriesKey(snakeLabels(labels))
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.families[name]; f != nil {
		delete(f.series, k)
	}
}

// SetGauge implements metrics.MetricSink.
func (s *Sink) SetGauge(key []string, val float32) { s.SetGaugeWithLabels(key, val, nil) }

// SetGaugeWithLabels implements metrics.MetricSink.
func (s *Sink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	name, _ := s.parse(key)
	s.observe(gaugeKind, name, nil, float64(val), labels, false)
}

// EmitKey implements metrics.MetricSink: a gauge.
func (s *Sink) EmitKey(key []string, val float32) {
	name, _ := s.parse(key)
	s.observe(gaugeKind, name, nil, float64(val), nil, false)
}

// IncrCounter implements metrics.MetricSink.
func (s *Sink) IncrCounter(key []string, val float32) { s.IncrCounterWithLabels(key, val, nil) }

// IncrCounterWithLabels implements metrics.MetricSink.
func (s *Sink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	name, _ := s.parse(key)
	s.observe(counterKind, name+"_total", nil, float64(val), labels, false)
}

// AddSample implements metrics.MetricSink.
func (s *Sink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

// AddSampleWithLabels implements metrics.MetricSink: a histogram, in
// seconds for a timer (go-metrics measures them in milliseconds).
func (s *Sink) AddSampleWithLabels(key []string, val float32, labels []metrics.Label) {
	name, typ := s.parse(key)
	u := sampleUnitOf(name, typ)
	s.observe(histogramKind, name+u.suffix, u.buckets, float64(val)*u.scale, labels, false)
}

// parse splits a go-metrics key (namespace, type word, then the key's
// parts) into the series name and the type word ("" when absent).
func (s *Sink) parse(key []string) (name, typ string) {
	if len(key) > 0 && key[0] == Namespace {
		key = key[1:]
	}
	if len(key) > 0 {
		switch key[0] {
		case "gauge", "counter", "timer", "sample", "kv":
			typ, key = key[0], key[1:]
		}
	}
	return seriesName(key), typ
}

// seriesName is plugreg_ and key's parts in snake_case, joined by "_".
func seriesName(key []string) string {
	var b strings.Builder
	b.WriteString(Namespace)
	for _, part := range key {
		b.WriteByte('_')
		snake(&b, part)
	}
	return b.String()
}

// snake writes part in snake_case: "appendEntries" -> "append_entries",
// "lastContact" -> "last_contact"; a character a metric name may not hold
// becomes "_".
func snake(b *strings.Builder, part string) {
	prevLower := false
	for _, r := range part {
		switch {
		case unicode.IsUpper(r) && r < unicode.MaxASCII:
			if prevLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			prevLower = false
		case r < unicode.MaxASCII && (unicode.IsLower(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
			prevLower = true
		default:
			b.WriteByte('_')
			prevLower = false
		}
	}
}

// sampleUnit is how a sample is recorded: its unit suffix, the factor to
// it, and its buckets.
type sampleUnit struct {
	suffix  string
	scale   float64
	buckets []float64
}

var (
	secondsBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	seconds        = sampleUnit{"_seconds", 1e-3, secondsBuckets} // go-metrics timers are milliseconds
	ratio          = sampleUnit{"_ratio", 1, prometheus.LinearBuckets(0.1, 0.1, 10)}
	bytesUnit      = sampleUnit{"_bytes", 1, prometheus.ExponentialBuckets(64, 4, 10)}
	count          = sampleUnit{"", 1, prometheus.ExponentialBuckets(1, 2, 17)}
)

// sampleUnitOf: timers are milliseconds; of the other samples raft and
// memberlist emit (AddSample, read from their source: raft v1.7.3,
// memberlist v0.6.0), one is milliseconds too (raft's leader lastContact),
// saturation is a ratio, memberlist's remote size is bytes, the rest are
// counts.
func sampleUnitOf(name, typ string) sampleUnit {
	switch {
	case typ == "timer", name == Namespace+"_raft_leader_last_contact":
		return seconds
	case strings.HasSuffix(name, "_saturation"):
		return ratio
	case name == Namespace+"_memberlist_size_remote":
		return bytesUnit
	}
	return count
}

// observe records val in the series of name and labels (buckets: a new
// histogram family's).
// A counter's val is added to it, or set as its total when setTotal.
func (s *Sink) observe(k kind, name string, buckets []float64, val float64, labels []metrics.Label, setTotal bool) {
	if math.IsNaN(val) {
		return
	}
	labels = snakeLabels(labels)
	key := seriesKey(labels)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.families[name]
	if f == nil {
		f = &family{name: name, kind: k, series: map[string]*series{}, help: helpOf(name, k), buckets: buckets}
		s.families[name] = f
	}
	if f.kind != k {
		return // one name, two kinds: the first one stays
	}
	sr := f.series[key]
	if sr == nil {
		sr = &series{labels: map[string]string{}}
		for _, l := range labels {
			sr.labels[l.Name] = l.Value
			if !slices.Contains(f.labels, l.Name) {
				f.labels = append(f.labels, l.Name)
				slices.Sort(f.labels)
			}
		}
		if k == histogramKind {
			sr.buckets = make([]uint64, len(f.buckets))
		}
		f.series[key] = sr
	}
	switch k {
	case gaugeKind:
		sr.value = val
	case counterKind:
		if setTotal {
			sr.value = val
		} else {
			sr.value += val
		}
	case histogramKind:
		sr.count++
		sr.sum += val
		if i, _ := slices.BinarySearch(f.buckets, val); i < len(f.buckets) {
			sr.buckets[i]++
		}
	}
}

func helpOf(name string, k kind) string {
	switch k {
	case counterKind:
		return "plugreg counter " + strings.TrimSuffix(name, "_total") + " (docs/operations.md, Metrics)"
	case histogramKind:
		return "plugreg distribution " + name + " (docs/operations.md, Metrics)"
	}
	return "plugreg gauge " + name + " (docs/operations.md, Metrics)"
}

// snakeLabels returns labels with snake_case names (raft labels its RPC
// timers "rpcType").
func snakeLabels(labels []metrics.Label) []metrics.Label {
	for i, l := range labels {
		var b strings.Builder
		snake(&b, l.Name)
		if b.String() != l.Name {
			out := slices.Clone(labels)
			for j := i; j < len(out); j++ {
				b.Reset()
				snake(&b, out[j].Name)
				out[j].Name = b.String()
			}
			return out
		}
	}
	return labels
}

// seriesKey identifies a series of a family by its labels, in name order.
func seriesKey(labels []metrics.Label) string {
	if len(labels) == 0 {
		return ""
	}
	ls := slices.Clone(labels)
	slices.SortFunc(ls, func(a, b metrics.Label) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.Name)
		b.WriteByte(0)
		b.WriteString(l.Value)
		b.WriteByte(0)
	}
	return b.String()
}

// Describe implements prometheus.Collector: nothing, an unchecked
// collector (its families appear as they are first emitted).
func (s *Sink) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (s *Sink) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.families {
		desc := prometheus.NewDesc(f.name, f.help, f.labels, nil)
		for _, sr := range f.series {
			values := make([]string, len(f.labels))
			for i, n := range f.labels {
				values[i] = sr.labels[n]
			}
			var m prometheus.Metric
			var err error
			switch f.kind {
			case gaugeKind:
				m, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, sr.value, values...)
			case counterKind:
				m, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, sr.value, values...)
			case histogramKind:
				cum := make(map[float64]uint64, len(f.buckets))
				var n uint64
				for i, ub := range f.buckets {
					n += sr.buckets[i]
					cum[ub] = n
				}
				m, err = prometheus.NewConstHistogram(desc, sr.count, sr.sum, cum, values...)
			}
			if err == nil {
				ch <- m
			}
		}
	}
}

// Value returns the value of a counter or gauge series by its full name
// ("plugreg_acl_denied_total") and labels; false when there is none. For
// tests and diagnostics.
func (s *Sink) Value(name string, labels ...metrics.Label) (float64, bool) {
	key := seriesKey(snakeLabels(labels))
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.families[name]
	if f == nil || f.series[key] == nil {
		return 0, false
	}
	return f.series[key].value, true
}
