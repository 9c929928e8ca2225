package cluster_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"github.com/plugreg/plugreg/transport"
)

// BenchmarkEventDelivery: one write at a time through the leader, with
// subs subscribers on every node of a real 3-node cluster. It reports, per
// write, the time from the leader's apply (its first subscriber's receipt)
// to the last receipt on the leader and on the followers, p50 and p99, and
// the memory one subscription costs.
func BenchmarkEventDelivery(b *testing.B) {
	for _, subs := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("subs=%d", subs), func(b *testing.B) {
			c := testcluster.New(b, 3, testcluster.Options{})
			leader := c.Leader()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			type receipt struct {
				node int
				at   time.Time
			}
			got := make(chan receipt, 3*subs*4)
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			var wg sync.WaitGroup
			for i, n := range c.Nodes {
				for s := 0; s < subs; s++ {
					ch, err := n.Hub().Watch(ctx, registry.Filter{Types: []string{"csi"}}, n.AppliedIndex())
					if err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						for range ch {
							got <- receipt{i, time.Now()}
						}
					}(i)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			perSub := float64(int64(ms1.HeapInuse+ms1.StackInuse)-int64(ms0.HeapInuse+ms0.StackInuse)) / float64(3*subs)

			li := indexOf(c, leader)
			var onLeader, onFollowers []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := leader.Backend().Register(ctx, plugin("ebs", fmt.Sprint(i))); err != nil {
					b.Fatal(err)
				}
				var first time.Time
				lastOn := map[bool]time.Time{}
				for r := 0; r < 3*subs; r++ {
					rc := <-got
					if rc.node == li && first.IsZero() {
						first = rc.at
					}
					if rc.at.After(lastOn[rc.node == li]) {
						lastOn[rc.node == li] = rc.at
					}
				}
				if first.IsZero() {
					b.Fatal("no receipt on the leader")
				}
				onLeader = append(onLeader, lastOn[true].Sub(first))
				onFollowers = append(onFollowers, lastOn[false].Sub(first))
			}
			b.StopTimer()
			report := func(name string, d []time.Duration) {
				sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
				b.ReportMetric(float64(d[len(d)/2].Microseconds()), name+"-p50-µs")
				b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), name+"-p99-µs")
			}
			report("leader", onLeader)
			report("followers", onFollowers)
			b.ReportMetric(perSub, "bytes/sub")
			cancel()
			wg.Wait()
		})
	}
}

// BenchmarkUpstreamDelivery: one write through the leader of a real
// 3-node cluster, delivered to upstreams client-agent event streams
// (agentrpc.Subscribe over the server port, as agents open them) on the
// leader; ns/op is from the write to the last stream's receipt, and
// allocs/op include every stream's encoding of the event on the server
// and its decoding in the receivers (same process).
func BenchmarkUpstreamDelivery(b *testing.B) {
	for _, upstreams := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("upstreams=%d", upstreams), func(b *testing.B) {
			c := testcluster.New(b, 3, testcluster.Options{})
			leader := c.Leader()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pool := transport.NewPool("127.0.0.1", 10*time.Second, nil)
			defer pool.Close()
			got := make(chan uint64, upstreams*4)
			var wg sync.WaitGroup
			for s := 0; s < upstreams; s++ {
				st, err := pool.Stream(ctx, leader.RaftAddr(), agentrpc.Subscribe, &agentrpc.SubscribeArgs{Types: []string{"csi"}})
				if err != nil {
					b.Fatal(err)
				}
				var first api.Event // the stream's starting heartbeat
				if err := st.Recv(&first); err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer st.Close()
					for {
						var ev api.Event
						if st.Recv(&ev) != nil {
							return
						}
						got <- ev.Index
					}
				}()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := leader.Backend().Register(ctx, plugin("ebs", fmt.Sprint(i)))
				if err != nil {
					b.Fatal(err)
				}
				for r := 0; r < upstreams; r++ {
					if idx := <-got; idx != res.Index {
						b.Fatalf("stream got index %d, want %d", idx, res.Index)
					}
				}
			}
			b.StopTimer()
			cancel()
			wg.Wait()
		})
	}
}
