package telemetry

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/internal/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	once    sync.Once
	handler http.Handler
	setErr  error
	global  atomic.Pointer[Sink] // set by Configure
)

// Configure routes go-metrics (raft's, memberlist's and plugreg's) to a
// Sink, once per process (go-metrics has one global), and returns the
// handler of /v1/metrics: the Sink's series, plugreg_build_info, and the
// Go runtime's and the process's own collectors (which replace go-metrics'
// runtime metrics, off here).
func Configure() (http.Handler, error) {
	once.Do(func() {
		sink := NewSink()
		if setErr = Use(sink); setErr != nil {
			return
		}
		reg := prometheus.NewRegistry()
		b := buildinfo.Read()
		info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: Namespace + "_build_info",
			Help: "1, labelled with the version plugreg was built as, its VCS revision and its Go version.",
		}, []string{"version", "revision", "goversion"})
		info.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
		for _, c := range []prometheus.Collector{sink, info, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
			if err := reg.Register(c); err != nil {
				setErr = fmt.Errorf("metrics: %w", err)
				return
			}
		}
		handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	})
	return handler, setErr
}

// Use makes sink go-metrics' global sink (what raft, memberlist and
// plugreg emit to) and the one SetGauge64, SetCounter64 and Forget write
// to. Configure calls it once; a test may call it with a Sink of its own
// (and read that Sink's series with Sink.Value).
func Use(sink *Sink) error {
	conf := metrics.DefaultConfig(Namespace)
	conf.EnableHostname = false
	conf.EnableRuntimeMetrics = false
	conf.EnableTypePrefix = true // how the Sink tells timers from other samples
	if _, err := metrics.NewGlobal(conf, sink); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	global.Store(sink)
	return nil
}

// SetGauge64 sets a gauge with float64 precision on the process's Sink
// (a no-op before Configure, as go-metrics' calls are).
func SetGauge64(key []string, val float64, labels ...metrics.Label) {
	if s := global.Load(); s != nil {
		s.SetGauge64(key, val, labels...)
	}
}

// SetCounter64 sets a counter to total on the process's Sink (see
// Sink.SetCounter64; a no-op before Configure).
func SetCounter64(key []string, total float64, labels ...metrics.Label) {
	if s := global.Load(); s != nil {
		s.SetCounter64(key, total, labels...)
	}
}

// Forget removes a gauge or counter series from the process's Sink (see
// Sink.Forget; a no-op before Configure).
func Forget(key []string, labels ...metrics.Label) {
	if s := global.Load(); s != nil {
		s.Forget(key, labels...)
	}
}
