package fsm

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// benchEntries are registrations as the Go client and the agents send
// them: each with a request ID, so the request-ID window is in the cost.
func benchEntries(b *testing.B, n int) []*raft.Log {
	logs := make([]*raft.Log, n)
	for i := range logs {
		r := reg(plugin("csi", fmt.Sprintf("name-%d", i%10000), fmt.Sprintf("alloc-%d", i)))
		r.RequestID = fmt.Sprintf("3f9c2a7e-%08x-4b1d-9e2f-6a5c0d8b7e41", i)
		data, err := EncodeCommand(r)
		if err != nil {
			b.Fatal(err)
		}
		logs[i] = &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data}
	}
	return logs
}

func BenchmarkApply(b *testing.B) {
	logs := benchEntries(b, b.N)
	f := New(nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.Apply(logs[i])
	}
}

// BenchmarkApplyHosts is BenchmarkApply with the instances spread over
// 1,000 hosts (NodeIDs), as a fleet's are; BenchmarkApply puts them all on
// one node, the node index's worst case.
func BenchmarkApplyHosts(b *testing.B) {
	logs := make([]*raft.Log, b.N)
	for i := range logs {
		p := plugin("csi", fmt.Sprintf("name-%d", i%10000), fmt.Sprintf("alloc-%d", i))
		p.NodeID = fmt.Sprintf("host-%d", i%1000)
		data, err := EncodeCommand(reg(p))
		if err != nil {
			b.Fatal(err)
		}
		logs[i] = &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data}
	}
	f := New(nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.Apply(logs[i])
	}
}

func BenchmarkApplyBatch64(b *testing.B) {
	logs := benchEntries(b, b.N)
	f := New(nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		end := min(i+64, b.N)
		f.ApplyBatch(logs[i:end])
	}
}

// stateOf builds a state with names × allocs instances spread over types.
func stateOf(b *testing.B, types, names, allocs int) *FSM {
	f := New(nil)
	var logs []*raft.Log
	idx := uint64(0)
	for n := 0; n < names; n++ {
		for a := 0; a < allocs; a++ {
			idx++
			p := plugin(fmt.Sprintf("type-%d", n%types), fmt.Sprintf("name-%05d", n), fmt.Sprintf("alloc-%03d", a))
			data, _ := EncodeCommand(reg(p))
			logs = append(logs, &raft.Log{Index: idx, Type: raft.LogCommand, Data: data})
			if len(logs) == 1024 {
				f.ApplyBatch(logs)
				logs = logs[:0]
			}
		}
	}
	if len(logs) > 0 {
		f.ApplyBatch(logs)
	}
	return f
}

func BenchmarkListPlugins10kNames(b *testing.B) {
	f := stateOf(b, 1, 10000, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if got := len(f.State().List("type-0")); got != 10000 {
			b.Fatalf("listed %d", got)
		}
	}
}

// 1M instances: 10k names × 100 allocs over 10 types.
func BenchmarkSnapshot1M(b *testing.B) {
	f := stateOf(b, 10, 10000, 100)
	var buf bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf.Reset()
		if err := WriteState(&buf, f.State()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "snapshot-bytes")
}

func BenchmarkRestore1M(b *testing.B) {
	f := stateOf(b, 10, 10000, 100)
	var buf bytes.Buffer
	if err := WriteState(&buf, f.State()); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := ReadState(bytes.NewReader(data))
		if err != nil || s.Len() != 1000000 {
			b.Fatalf("restore: %v (%d instances)", err, s.Len())
		}
	}
	b.ReportMetric(float64(len(data)), "snapshot-bytes")
}

// BenchmarkHeap1M applies 1M registrations of the bench's record (10,000
// names x 100 allocs over 10 types, one NodeID, one option; see
// cmd/plugreg-bench) in batches of 64 as raft hands them over, and reports
// the live heap the state holds per instance. It builds the state once
// whatever b.N is (the figure is a size, not a rate).
func BenchmarkHeap1M(b *testing.B) {
	const names, allocs = 10000, 100
	for range 1 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f := New(nil)
		batch := make([]*raft.Log, 0, 64)
		idx := uint64(0)
		for a := range allocs {
			for n := range names {
				alloc := fmt.Sprintf("c%04d-%07d", a, n)
				p := &api.PluginInfo{Type: fmt.Sprintf("type-%d", n%10), Name: fmt.Sprintf("name-%05d", n), AllocID: alloc,
					Version: "1.4.0", NodeID: "node-0042", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/plugins/" + alloc + "/csi.sock"},
					Options: map[string]string{"zone": "eu-west-1a"}}
				data, err := EncodeCommand(reg(p))
				if err != nil {
					b.Fatal(err)
				}
				idx++
				batch = append(batch, &raft.Log{Index: idx, Type: raft.LogCommand, Data: data})
				if len(batch) == cap(batch) {
					f.ApplyBatch(batch)
					batch = batch[:0]
				}
			}
		}
		f.ApplyBatch(batch)
		runtime.GC()
		runtime.ReadMemStats(&after)
		n := f.State().Len()
		if n != names*allocs {
			b.Fatalf("%d instances, want %d", n, names*allocs)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/instance")
		runtime.KeepAlive(f)
	}
}

// BenchmarkDecodeRestoreCommand decodes a restore command carrying 32 MiB
// of (incompressible) state, as every node does when it applies one.
func BenchmarkDecodeRestoreCommand(b *testing.B) {
	state := make([]byte, 32<<20)
	for i := range state {
		state[i] = byte(i * 7)
	}
	data, err := EncodeCommand(&RestoreRequest{StateGzip: state})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeCommand(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCommand: a registration as the bench sends it, decoded
// from each encoding (every server decodes every entry once).
func BenchmarkDecodeCommand(b *testing.B) {
	p := plugin("bench", "name-00042", "c0064-0000042")
	p.NodeID = "node-0042"
	p.Options = map[string]string{"plugreg.io/zone": "zone-a", "driver": "bench"}
	req := &RegisterRequest{Plugin: p, RequestID: "8d3bd8a1-3f73-4c35-9a0f-4e5a2d8c2f10"}
	for _, enc := range []struct {
		name string
		enc  Encoding
	}{{"msgpack", Msgpack}, {"protobuf", Protobuf}} {
		cmd, err := EncodeCommandIn(req, enc.enc)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(enc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeCommand(cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(enc.name+"-encode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeCommandIn(req, enc.enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
