package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"syscall"
	"testing"
	"time"

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

// BenchmarkApplyHosts measures the FSM's cost per write in a fleet: H
// hosts each running the same 20 plugin names, so every name has one
// instance per host (a CSI node plugin, a device plugin). Each write is
// one of: a new registration (a new host's instance), the deregistration
// of one instance, a node's health mark (20 instances suspect, or
// cleared) and the deregistration of a node (20 instances). The cost per
// write must not grow with H. "host-sync" is a new host's 20
// registrations in one entry (HostSyncCommand). "grow" is the older case: registrations
// spread over 1,000 hosts into a state that grows with b.N.
func BenchmarkApplyHosts(b *testing.B) {
	b.Run("grow", benchApplyGrow)
	for _, hosts := range []int{100, 1000, 10000, 50000} {
		stream := fleetSnapshot(b, hosts)
		for _, op := range fleetOps {
			b.Run(fmt.Sprintf("hosts=%d/%s", hosts, op.name), func(b *testing.B) {
				benchFleetOp(b, stream, hosts, op.req)
			})
		}
		for _, form := range []struct {
			name    string
			entries func(host int) []Request
		}{
			{"new-host-as-20-entries", func(host int) []Request {
				var out []Request
				for _, p := range newHostSync(host).Register {
					out = append(out, NewRegisterRequest(p, "", p.NodeID))
				}
				return out
			}},
			{"new-host-as-1-entry", func(host int) []Request { return []Request{newHostSync(host)} }},
		} {
			b.Run(fmt.Sprintf("hosts=%d/%s", hosts, form.name), func(b *testing.B) {
				benchNewHosts(b, stream, hosts, form.entries)
			})
		}
	}
}

// benchNewHosts times the FSM applying a new host's 20 registrations in
// a fleet of hosts hosts: one op is one host, its entries encoded before
// the timer (encoding is the proposer's, once; decoding and applying,
// every server's) and handed over in one ApplyBatch, as raft would once
// they commit together (the single entries' most favourable case). A
// fresh state every hosts new hosts, as "register".
func benchNewHosts(b *testing.B, stream []byte, hosts int, entries func(host int) []Request) {
	var (
		f     *FSM
		index uint64
	)
	restore := func() {
		f = New(nil)
		if err := f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
			b.Fatal(err)
		}
		index = f.State().Index()
	}
	pool := make([][]*raft.Log, min(hosts, b.N))
	for h := range pool {
		for _, req := range entries(h) {
			data, err := EncodeCommand(req)
			if err != nil {
				b.Fatal(err)
			}
			pool[h] = append(pool[h], &raft.Log{Type: raft.LogCommand, Data: data})
		}
	}
	restore()
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration // the process's CPU time while timed
	from := cpuTime(b)
	for i := range b.N {
		h := i % len(pool)
		if h == 0 && i > 0 {
			b.StopTimer()
			cpu += cpuTime(b) - from
			restore()
			runtime.GC() // the restore's garbage is not the ops'
			from = cpuTime(b)
			b.StartTimer()
		}
		for _, l := range pool[h] {
			index++
			l.Index = index
		}
		for _, r := range f.ApplyBatch(pool[h]) {
			if res := r.(*ApplyResult); res.Err != nil || res.Result == api.ResultUnchanged || len(res.Refused) > 0 {
				b.Fatalf("%+v", res)
			}
		}
	}
	cpu += cpuTime(b) - from
	b.ReportMetric(float64(len(pool[0])), "entries/host")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/host")
}

// cpuTime is the CPU time this process has used (every thread's: the
// collector's work for the ops is theirs): on a machine shared with other
// work, a steadier measure of the ops' cost than the wall clock.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const fleetNames = 20

// fleetOps are the writes BenchmarkApplyHosts times. req returns the
// i-th write since the state was restored, or nil once the state has
// none left of that kind (the bench then restores a fresh one, untimed).
var fleetOps = []struct {
	name string
	req  func(i, hosts int) Request
}{
	{"register", func(i, hosts int) Request {
		// A fresh state every hosts×20 registrations: the lists at most
		// double, so the case measures a fleet of about hosts hosts,
		// not of b.N new ones.
		if i >= hosts*fleetNames {
			return nil
		}
		p := plugin("csi", fmt.Sprintf("name-%02d", i%fleetNames), fmt.Sprintf("new-%d", i))
		p.NodeID = fmt.Sprintf("newhost-%d", i/fleetNames)
		return reg(p)
	}},
	{"host-sync", func(i, hosts int) Request {
		// A new host's 20 registrations in one entry (its agent's
		// first round): the cost per write is per host here, 20
		// instances, against 20 of "register".
		if i >= hosts {
			return nil
		}
		return newHostSync(i)
	}},
	{"deregister", func(i, hosts int) Request {
		if i >= hosts*fleetNames {
			return nil
		}
		h, n := i/fleetNames, i%fleetNames
		return dereg("csi", fmt.Sprintf("name-%02d", n), fmt.Sprintf("h%d-n%d", h, n))
	}},
	{"node-health", func(i, hosts int) Request {
		// Mark every host suspect, then clear every mark, and so on:
		// each write changes the node's 20 instances.
		return &NodeHealthRequest{NodeID: fmt.Sprintf("host-%d", i%hosts), Suspect: (i/hosts)%2 == 0, Reason: suspectReason((i/hosts)%2 == 0),
			LastSeen: lastSeen((i/hosts)%2 == 0)}
	}},
	{"deregister-node", func(i, hosts int) Request {
		if i >= hosts {
			return nil
		}
		return &DeregisterNodeRequest{NodeID: fmt.Sprintf("host-%d", i)}
	}},
}

// newHostSync is new host i's round: its fleetNames registrations, as
// "register" writes them one by one (new-<instance>, newhost-<i>).
func newHostSync(i int) *HostSyncRequest {
	r := &HostSyncRequest{HostSyncRequest: api.HostSyncRequest{NodeID: fmt.Sprintf("newhost-%d", i)}}
	r.IfNodeID = r.NodeID
	for n := range fleetNames {
		p := plugin("csi", fmt.Sprintf("name-%02d", n), fmt.Sprintf("new-%d", i*fleetNames+n))
		p.NodeID = r.NodeID
		r.Register = append(r.Register, p)
	}
	return r
}

func suspectReason(suspect bool) string {
	if suspect {
		return "gossip: node failed"
	}
	return ""
}

func lastSeen(suspect bool) time.Time {
	if suspect {
		return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	}
	return time.Time{}
}

// fleetSnapshot is the snapshot stream of hosts hosts × fleetNames
// names, host h's instance of name n being alloc "h<h>-n<n>" (each list
// newest first: the highest host first). A stream rather than a log:
// applying a million registrations one by one is what the bench measures,
// too slow to set it up.
func fleetSnapshot(b testing.TB, hosts int) []byte {
	var buf bytes.Buffer
	enc := newTestEncoder(&buf)
	n := uint64(hosts * fleetNames)
	hdr := RegistryState{Version: SnapshotVersion, Index: n, Names: fleetNames, Instances: int(n)}
	if err := enc.Encode(&hdr); err != nil {
		b.Fatal(err)
	}
	for name := 0; name < fleetNames; name++ {
		rec := NameList{Type: "csi", Name: fmt.Sprintf("name-%02d", name)}
		for h := hosts - 1; h >= 0; h-- {
			p := plugin("csi", rec.Name, fmt.Sprintf("h%d-n%d", h, name))
			p.NodeID = fmt.Sprintf("host-%d", h)
			p.CreateIndex = uint64(h*fleetNames + name + 1)
			p.ModifyIndex = p.CreateIndex
			rec.Instances = append(rec.Instances, p)
		}
		if err := enc.Encode(&rec); err != nil {
			b.Fatal(err)
		}
	}
	return buf.Bytes()
}

func benchFleetOp(b *testing.B, stream []byte, hosts int, req func(i, hosts int) Request) {
	var (
		f     *FSM
		index uint64
		i     int
	)
	restore := func() {
		f = New(nil)
		if err := f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
			b.Fatal(err)
		}
		index, i = f.State().Index(), 0
	}
	restore()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r := req(i, hosts)
		if r == nil {
			b.StopTimer()
			restore()
			r = req(i, hosts)
			b.StartTimer()
		}
		i++
		index++
		data, err := EncodeCommand(r)
		if err != nil {
			b.Fatal(err)
		}
		res := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(*ApplyResult)
		if res.Err != nil || res.Result == api.ResultUnchanged || res.Result == api.ResultAbsent {
			b.Fatalf("%T: %v %v", r, res.Result, res.Err)
		}
	}
}

func benchApplyGrow(b *testing.B) {
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

func BenchmarkApplyBatch64(b *testing.B) { benchApplyBatch(b, 64) }

// BenchmarkApplyBatch is BenchmarkApplyBatch64 at the batch sizes a
// cluster sees: one entry at one client, a few at 16 writers, tens at 256
// (the bench's ops per fsync).
func BenchmarkApplyBatch(b *testing.B) {
	for _, n := range []int{1, 2, 4, 16} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) { benchApplyBatch(b, n) })
	}
}

// benchApplyBatch applies b.N registrations in batches of n entries.
func benchApplyBatch(b *testing.B, n int) {
	logs := benchEntries(b, b.N)
	f := New(nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += n {
		end := min(i+n, b.N)
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
// tools/bench) in batches of 64 as raft hands them over, and reports
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
