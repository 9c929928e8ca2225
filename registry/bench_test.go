package registry_test

import (
	"context"
	"fmt"
	"github.com/plugreg/plugreg/internal/testing/localreg"
	"github.com/plugreg/plugreg/registry"
	"testing"
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
