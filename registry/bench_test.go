package registry_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/tests/framework/localreg"
)

// BenchmarkDeliver1000Subscribers: one write, delivered to 1000
// subscribers; ns/op is from the write to the last subscriber's receipt.
func BenchmarkDeliver1000Subscribers(b *testing.B) {
	const subs = 1000
	s := localreg.New(0)
	defer s.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, subs)
	for i := 0; i < subs; i++ {
		ch, _ := s.Watch(ctx, registry.Filter{Types: []string{"csi"}}, 0)
		go func() {
			for range ch {
				done <- struct{}{}
			}
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.RegisterPlugin(ctx, plugin("csi", "ebs", fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
		for j := 0; j < subs; j++ {
			<-done
		}
	}
}

// BenchmarkRegister measures a local write with no subscriber, and with one
// subscriber that never reads: the second must not be slower.
func BenchmarkRegister(b *testing.B) {
	for _, stuck := range []bool{false, true} {
		b.Run(fmt.Sprintf("stuck-subscriber=%v", stuck), func(b *testing.B) {
			s := localreg.New(0)
			defer s.Shutdown()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if stuck {
				s.Watch(ctx, registry.Filter{}, 0)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.RegisterPlugin(ctx, plugin("csi", fmt.Sprint(i%1000), fmt.Sprint(i))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDeliveryCurve is the cost of delivering one write against the
// number of subscribers (Deliver streams, as the HTTP API and client
// agents hold them), in two shapes: none of them match the written type
// (plus one that does, whose wait is the latency), and all of them match.
// cpu-ns/write is the process's CPU (the writer, every subscription
// goroutine and their consumers, the GC) per write; p50-ns and p99-ns are
// from the write's call to the last matching subscriber's receipt.
func BenchmarkDeliveryCurve(b *testing.B) {
	for _, shape := range []string{"none-match", "all-match"} {
		for _, watchers := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/watchers=%d", shape, watchers), func(b *testing.B) {
				benchDelivery(b, watchers, shape == "all-match")
			})
		}
	}
}

func benchDelivery(b *testing.B, watchers int, allMatch bool) {
	s := localreg.New(0)
	defer s.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// remaining counts the receipts this write still waits for; the last
	// receiver sends its time.
	var remaining atomic.Int64
	last := make(chan time.Time, 1)
	consume := func(ch <-chan backend.Event) {
		for range ch {
			if remaining.Add(-1) == 0 {
				last <- time.Now()
			}
		}
	}
	subscribe := func(typ string) {
		ch, err := s.Deliver(ctx, registry.Filter{Types: []string{typ}}, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		go consume(ch)
	}
	expect := 1
	if allMatch {
		expect = watchers
		for range watchers {
			subscribe("csi")
		}
	} else {
		for range watchers {
			subscribe("device")
		}
		subscribe("csi")
	}
	write := func(i int) time.Duration {
		remaining.Store(int64(expect))
		start := time.Now()
		if _, err := s.RegisterPlugin(ctx, plugin("csi", "ebs", fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
		return (<-last).Sub(start)
	}
	write(-1) // every subscription has started and read once
	lat := make([]time.Duration, 0, b.N)
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lat = append(lat, write(i))
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/write")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
