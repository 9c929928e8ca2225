//go:build linux

package proctest

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// The test binary run as a Go process that ignores SIGTERM and hangs
	// in a function the dump must name (TestTerminateDumpsAHungProcess).
	if os.Getenv("PROCTEST_HANG") == "1" {
		signal.Ignore(syscall.SIGTERM)
		hangOnPurpose()
	}
	Main(m)
}

func hangOnPurpose() {
	fmt.Println("hanging")
	select {}
}

// A Go process that does not end on SIGTERM is made to write its
// goroutines' stacks before it is killed, and GoroutineDump finds them
// in the log of its last run.
func TestTerminateDumpsAHungProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := New("hung", self, filepath.Join(t.TempDir(), "hung.log"), "-test.run", "^$")
	p.Env = []string{"PROCTEST_HANG=1"}
	for run := 1; run <= 2; run++ {
		p.Start(t)
		Poll(t, 10*time.Second, "the process to hang", nil, func() (bool, string) { return strings.Count(p.Log(), "hanging") == run, p.Log() })
		if _, ok := p.Terminate(200 * time.Millisecond); ok {
			t.Fatalf("run %d exited on SIGTERM; it ignores it", run)
		}
		dump := GoroutineDump(p.LogPath)
		if !strings.HasPrefix(dump, "SIGQUIT: quit") || !strings.Contains(dump, "hangOnPurpose") {
			t.Fatalf("run %d: dump %q; want the stacks with hangOnPurpose", run, dump)
		}
		if n := strings.Count(dump, "SIGQUIT: quit"); n != 1 {
			t.Fatalf("run %d: the dump holds %d runs' stacks; want the last run's", run, n)
		}
	}
}

func sh(t *testing.T, script string) *Proc {
	t.Helper()
	return New("sh", "/bin/sh", filepath.Join(t.TempDir(), "sh.log"), "-c", script)
}

// A process's runs share one log; the test's own ends are not crashes; a
// restart is a new run of the same Proc.
func TestProcRuns(t *testing.T) {
	p := sh(t, `echo "run $RUN"; exec sleep 60`)
	p.Env = []string{"RUN=1"}
	p.Start(t)
	Poll(t, 10*time.Second, "the first run's line", nil, func() (bool, string) { return strings.Contains(p.Log(), "run 1"), p.Log() })
	if p.Exited() || p.Crashed() || p.State() != nil {
		t.Fatalf("running: exited %v crashed %v state %v", p.Exited(), p.Crashed(), p.State())
	}
	if took, ok := p.Terminate(10 * time.Second); !ok || p.Crashed() {
		t.Fatalf("terminate: %v %v, crashed %v", took, ok, p.Crashed())
	}
	p.Env = []string{"RUN=2"}
	p.Start(t)
	Poll(t, 10*time.Second, "the second run's line", nil, func() (bool, string) { return strings.Contains(p.Log(), "run 2"), p.Log() })
	before := time.Now()
	if at := p.Kill9(t); at.Before(before) || !p.Exited() || p.Crashed() {
		t.Fatalf("kill -9 at %v (called at %v): exited %v crashed %v", at, before, p.Exited(), p.Crashed())
	}
	if l := p.Log(); !strings.Contains(l, "run 1") || strings.Count(l, "=== test: start") != 2 {
		t.Fatalf("log of two runs:\n%s", l)
	}
	if tail := LogTail(p.LogPath, 1); !strings.Contains(tail, "exited as the test expected") {
		t.Fatalf("last line %q", tail)
	}
}

// fatalTB turns Fatalf into a panic of fatal, which the caller recovers.
type fatalTB struct{ testing.TB }

type fatal string

func (fatalTB) Helper() {}
func (fatalTB) Fatalf(format string, args ...any) {
	panic(fatal(fmt.Sprintf(format, args...)))
}

// pollFailure calls Poll and returns how it failed the test ("": it did not).
func pollFailure(t *testing.T, procs []*Proc) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			msg = string(f)
		}
	}()
	Poll(fatalTB{t}, 20*time.Second, "something that never holds", procs, func() (bool, string) { return false, "never" })
	return ""
}

// Poll fails at once, with the log's tail, when a process it watches ends
// unasked; a process expected to end (WaitExit) is not a crash.
func TestPollSeesCrash(t *testing.T) {
	p := sh(t, `echo "about to fail"; exit 3`)
	p.Start(t)
	start := time.Now()
	if msg := pollFailure(t, []*Proc{p}); !strings.Contains(msg, "exited unexpectedly") || !strings.Contains(msg, "about to fail") ||
		time.Since(start) > 15*time.Second {
		t.Fatalf("Poll failed with %q after %v", msg, time.Since(start))
	}

	q := sh(t, `echo "bad input" >&2; exit 2`)
	q.Start(t)
	if st := q.WaitExit(t, 10*time.Second); st.ExitCode() != 2 || q.Crashed() || !strings.Contains(q.Log(), "bad input") {
		t.Fatalf("WaitExit: %v, crashed %v, log %q", st, q.Crashed(), q.Log())
	}
}

func TestFreePorts(t *testing.T) {
	ports := FreePorts(t, "127.0.0.1", 20)
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v", ports)
		}
		seen[p] = true
	}
}

// Build finds the repository from a package's directory, builds once per
// test binary run, and the binary runs.
func TestBuild(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if wd, _ := os.Getwd(); filepath.Join(root, "tests", "framework", "proctest") != wd {
		t.Fatalf("repository root %s for %s", root, wd)
	}
	bin := Build(t, "./examples/stub-plugin")
	start := time.Now()
	if again := Build(t, "./examples/stub-plugin"); again != bin || time.Since(start) > time.Second {
		t.Fatalf("second Build: %s in %v; the first built %s", again, time.Since(start), bin)
	}
	p := New("stub-plugin", bin, filepath.Join(t.TempDir(), "p.log"), "-idx", "7")
	p.Start(t)
	if st := p.WaitExit(t, 30*time.Second); st.ExitCode() == 0 || !strings.Contains(p.Log(), "two digits") {
		t.Fatalf("stub-plugin -idx 7: %v\n%s", st, p.Log())
	}
}
