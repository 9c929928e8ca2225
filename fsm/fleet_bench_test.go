package fsm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkSnapshotFleet writes and reads back the snapshot of a fleet's
// state (hosts × 20 names, one instance per host and name, as
// BenchmarkApplyHosts builds it), and reports the live heap per instance
// of the restored state: the three figures of a state's size that the
// sizing guide (docs/operations.md) scales from.
func BenchmarkSnapshotFleet(b *testing.B) {
	for _, hosts := range benchFleetSizes(1000, 10000, 50000) {
		stream := fleetSnapshot(b, hosts)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f := New(nil)
		if err := f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		instances := f.State().Len()
		heap := float64(after.HeapAlloc-before.HeapAlloc) / float64(instances)
		b.Run(fmt.Sprintf("hosts=%d/write", hosts), func(b *testing.B) {
			var buf bytes.Buffer
			b.ReportAllocs()
			for range b.N {
				buf.Reset()
				if err := WriteState(&buf, f.State()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "snapshot-bytes")
			b.ReportMetric(float64(buf.Len())/float64(instances), "snapshot-B/instance")
			b.ReportMetric(heap, "heap-B/instance")
		})
		// What a state check costs each server (cluster's statecheck.go).
		b.Run(fmt.Sprintf("hosts=%d/digest", hosts), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := Digest(f.State()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(instances), "ns/instance")
		})
		b.Run(fmt.Sprintf("hosts=%d/read", hosts), func(b *testing.B) {
			var buf bytes.Buffer
			if err := WriteState(&buf, f.State()); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for range b.N {
				s, err := ReadState(bytes.NewReader(buf.Bytes()))
				if err != nil || s.Len() != instances {
					b.Fatalf("read: %v (%d instances of %d)", err, s.Len(), instances)
				}
			}
		})
		runtime.KeepAlive(f)
	}
}

// benchFleetSizes is sizes, or only those in PLUGREG_BENCH_HOSTS
// (comma-separated) when it is set: one size profiled alone.
func benchFleetSizes(sizes ...int) []int {
	only := os.Getenv("PLUGREG_BENCH_HOSTS")
	if only == "" {
		return sizes
	}
	var out []int
	for _, f := range strings.Split(only, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}
