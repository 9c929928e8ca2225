package fsm

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkHostSyncStorm is a fleet's registration storm (every host's
// first anti-entropy round after a restart of the fleet, or of the
// servers after its nodes were reaped) as the FSM of each server applies
// it: H hosts × 20 plugins into an empty state, either as one entry per
// plugin (each a node-bound host's conditional registration, as before
// HostSyncCommand) or as one HostSyncCommand per host. Raft hands entries
// over in batches of up to 64 (MaxAppendEntries); both are applied so.
// One op is the whole storm; ns/op is its FSM time on one server, and
// "entries" how many log entries it took. The entries are encoded before
// the timer starts: encoding is the proposer's, once; decoding and
// applying is every server's.
func BenchmarkHostSyncStorm(b *testing.B) {
	for _, hosts := range []int{100, 1000, 10000} {
		for _, mode := range []struct {
			name    string
			entries func(host int) []Request
		}{
			{"per-plugin", func(host int) []Request {
				var out []Request
				for _, p := range newHostSync(host).Register {
					out = append(out, NewRegisterRequest(p, "", p.NodeID))
				}
				return out
			}},
			{"host-sync", func(host int) []Request { return []Request{newHostSync(host)} }},
		} {
			b.Run(fmt.Sprintf("hosts=%d/%s", hosts, mode.name), func(b *testing.B) {
				var logs []*raft.Log
				for h := range hosts {
					for _, req := range mode.entries(h) {
						data, err := EncodeCommand(req)
						if err != nil {
							b.Fatal(err)
						}
						logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogCommand, Data: data})
					}
				}
				b.ReportAllocs()
				runtime.GC()
				b.ResetTimer()
				from := cpuTime(b)
				for range b.N {
					f := New(nil)
					for i := 0; i < len(logs); i += 64 {
						for _, r := range f.ApplyBatch(logs[i:min(i+64, len(logs))]) {
							if res := r.(*ApplyResult); res.Err != nil || len(res.Refused) > 0 {
								b.Fatalf("%+v", res)
							}
						}
					}
					if f.State().Len() != hosts*fleetNames {
						b.Fatalf("%d instances", f.State().Len())
					}
				}
				b.ReportMetric(float64((cpuTime(b)-from).Nanoseconds())/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(len(logs)), "entries")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(hosts), "ns/host")
			})
		}
	}
}
