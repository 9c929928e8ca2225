package pluginwatcher

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// BenchmarkProbe is one liveness probe of a registered plugin, as the
// watcher makes every ProbeInterval for every socket: a gRPC connection
// dialed afresh, GetInfo, the answer validated, the connection closed.
// cpu-ns/op is the process's CPU (both ends: the plugin is served in
// this process), what an agent at rest pays per socket per interval.
func BenchmarkProbe(b *testing.B) {
	dir := shortDir(b)
	path := filepath.Join(dir, "p.sock")
	startPlugin(b, path, &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "ebs.csi.aws.com", SupportedVersions: []string{"1.0.0"}})
	w, err := New(testConfig(b, dir, newStoreRegistrar(b, testNode)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := w.probe(ctx, path); err != nil {
		b.Fatal(err)
	}
	cpu0 := processCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, _, err := w.probe(ctx, path); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
