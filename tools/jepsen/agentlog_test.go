package main

import (
	"reflect"
	"strings"
	"testing"
)

const nilRaftPanic = `panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x58 pc=0x8f1e2a]

goroutine 117 [running]:
github.com/hashicorp/raft.(*Raft).State(...)
	/root/go/pkg/mod/github.com/hashicorp/raft@v1.7.3/api.go:1011
github.com/plugreg/plugreg/cluster.(*Server).IsLeader(...)
	/src/cluster/server.go:344
github.com/plugreg/plugreg/cluster.(*Server).readIndexLocal(0xc0001b2000, {0xb1c3f8, 0xc000412aa0})
	/src/cluster/apply.go:200 +0x2a
github.com/plugreg/plugreg/cluster.(*Server).handleRPC(0xc0001b2000, {0xb1c3f8, 0xc000412aa0}, {0xc00041a0f0, 0x9}, 0xc000418150)
	/src/cluster/rpc.go:59 +0x1c5
created by github.com/plugreg/plugreg/transport.(*Mux).serve in goroutine 33
	/src/transport/mux.go:120 +0x7a

goroutine 1 [select]:
main.runAgent({0xc0000a2010, 0x2a, 0x2a})
	/src/cmd/plugreg/agent.go:118 +0x1a5`

func TestScanPanics(t *testing.T) {
	start := func(n int) string {
		return "\n=== harness: start n1 at 2026-11-23T01:00:0" + string(rune('0'+n)) + "Z (run time 1s)"
	}
	logged := "2026-11-23T01:00:00.123Z [INFO]  plugreg.raft: entering follower state"
	for _, tc := range []struct {
		name  string
		log   string
		want  []int  // the processes of the reports found
		lines []int  // their lines
		brief string // of the first report, when set
	}{
		{name: "clean", log: start(0) + "\n" + logged + "\n" + logged},
		{name: "nil raft at startup", log: start(0) + "\n" + logged + "\n=== harness: n1 exited at run time 2s: signal: killed, asked by the harness" +
			start(1) + "\n" + logged + "\n" + nilRaftPanic + "\n=== harness: n1 exited at run time 3s: exit status 2, NOT caused by the harness",
			want: []int{1}, lines: []int{7},
			brief: "panic: runtime error: invalid memory address or nil pointer dereference [signal SIGSEGV: segmentation violation code=0x1 addr=0x58 pc=0x8f1e2a] at " +
				"github.com/hashicorp/raft.(*Raft).State <- github.com/plugreg/plugreg/cluster.(*Server).IsLeader <- " +
				"github.com/plugreg/plugreg/cluster.(*Server).readIndexLocal <- github.com/plugreg/plugreg/cluster.(*Server).handleRPC"},
		{name: "a panic while panicking is one report", log: start(0) + "\npanic: first [recovered]\n\tpanic: second\n\ngoroutine 5 [running]:\nmain.f()\n\t/x.go:1",
			want: []int{0}, lines: []int{3}, brief: "panic: first [recovered] at main.f"},
		{name: "fatal error", log: start(0) + "\nfatal error: concurrent map writes\n\ngoroutine 9 [running]:\ninternal/runtime/maps.fatal({0x1, 0x2})\n\t/x.go:1",
			want: []int{0}, lines: []int{3}, brief: "fatal error: concurrent map writes at internal/runtime/maps.fatal"},
		{name: "a recovered handler panic, then life goes on", log: start(0) + "\n2026-11-23T01:00:00Z http: panic serving 127.0.0.100:4242: boom\n" + logged + "\n" + logged,
			want: []int{0}, lines: []int{3}},
		{name: "two processes, two crashes", log: start(0) + "\n" + nilRaftPanic + start(1) + "\n" + logged + start(2) + "\n" + nilRaftPanic,
			want: []int{0, 2}, lines: []int{3, 24}},
		{name: "the harness's SIGQUIT dump is not a panic", log: start(0) + "\n" + logged +
			"\n=== harness: SIGQUIT n1: still running 10s after SIGTERM; its goroutines follow\nSIGQUIT: quit\nPC=0x4711 m=0 sigcode=0\n\ngoroutine 7 [select]:\nfatal error: not really, a frame's text\npanic: inside the dump" +
			start(1) + "\n" + logged},
		{name: "a snapshot the FSM refused as unreadable", log: start(0) + "\n" + logged + "\n2026-11-26T19:00:00.000Z [ERROR] plugreg.raft: failed to take snapshot: error=\"persist snapshot at 812: fsm: bad snapshot: would not read back: jplugin/p: alloc s-00-ab out of recency order\"\n" + logged,
			want: []int{0}, lines: []int{4}},
		{name: "replicas whose registries differ", log: start(0) + "\n" + logged + "\n2026-11-28T19:00:00.000Z [ERROR] plugreg.state-check: this server's registry differs from another server's at the same index: one of them holds damaged data: node=n2 index=24 other=n1\n" + logged,
			want: []int{0}, lines: []int{4}},
		{name: "the word without the colon is not a report", log: start(0) + "\n" + logged + " recovered from a panicky peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := scanPanics(strings.NewReader(tc.log))
			if err != nil {
				t.Fatal(err)
			}
			var procs, lines []int
			for _, p := range got {
				procs, lines = append(procs, p.Proc), append(lines, p.Line)
			}
			if !reflect.DeepEqual(procs, tc.want) || !reflect.DeepEqual(lines, tc.lines) {
				t.Fatalf("reports in processes %v at lines %v, want %v at %v: %+v", procs, lines, tc.want, tc.lines, got)
			}
			if tc.brief != "" && got[0].brief() != tc.brief {
				t.Errorf("brief:\n got %s\nwant %s", got[0].brief(), tc.brief)
			}
		})
	}
}

func TestDumpHighlights(t *testing.T) {
	dump := `SIGQUIT: quit
PC=0x47a1c1 m=0 sigcode=0

goroutine 1 gp=0x29da89a501e0 m=nil [semacquire, 1 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/proc.go:460 +0xce
sync.runtime_SemacquireWaitGroup(0xc000132f38?)
	/usr/local/go/src/runtime/sema.go:114 +0x25
sync.(*WaitGroup).Wait(0xc000132f30)
	/usr/local/go/src/sync/waitgroup.go:118 +0x48
github.com/hashicorp/raft.(*Raft).Shutdown.func1()
	/raft/api.go:1070 +0x1a
main.main()
	/src/cmd/plugreg/main.go:60 +0x1d

goroutine 40 gp=0x29da89ba9680 m=nil [select, 1 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/proc.go:460 +0xce
runtime.selectgo(0xc0001c3f30, 0xc0001c3e88, 0x0?, 0x0, 0x0?, 0x1)
	/usr/local/go/src/runtime/select.go:351 +0x8b3
github.com/hashicorp/raft.(*netPipeline).AppendEntries(0xc0003a2000, 0xc0004b2000, 0xc0004b6000)
	/raft/net_transport.go:885 +0x1d6
github.com/hashicorp/raft.(*Raft).pipelineSend(0xc000188a08, 0xc0001d2000, {0xb1d4a0, 0xc0003a2000}, 0xc0005a1f68, 0x1f4)
	/raft/replication.go:520 +0x10a
created by github.com/hashicorp/raft.(*raftState).goFunc in goroutine 20
	/raft/state.go:149 +0x66

goroutine 41 [IO wait]:
internal/poll.runtime_pollWait(0x7f, 0x72)
	/usr/local/go/src/runtime/netpoll.go:351 +0x85`
	want := []string{
		"goroutine 1 [semacquire, 1 minutes]: sync.(*WaitGroup).Wait <- github.com/hashicorp/raft.(*Raft).Shutdown.func1 <- main.main",
		"goroutine 40 [select, 1 minutes]: github.com/hashicorp/raft.(*netPipeline).AppendEntries <- github.com/hashicorp/raft.(*Raft).pipelineSend",
	}
	if got := dumpHighlights(dump); !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
