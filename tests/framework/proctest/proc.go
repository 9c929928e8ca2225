//go:build linux

package proctest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a process a test runs, possibly several times (Start again after
// it exited): every run appends its stdout and stderr to the same log.
type Proc struct {
	Name    string
	Bin     string
	Args    []string
	Env     []string // added to the test binary's environment
	LogPath string

	mu  sync.Mutex
	cur *run // the last run; nil before the first Start
}

// run is one run of a Proc.
type run struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed once the process exited; cmd.ProcessState is set then
	expected bool          // the test ended it, or said it may end (Expect)
}

// New returns a Proc that is not started yet: set Env, then Start it.
func New(name, bin, logPath string, args ...string) *Proc {
	return &Proc{Name: name, Bin: bin, Args: args, LogPath: logPath}
}

// Start starts a new Proc (see New and Proc.Start).
func Start(t testing.TB, name, bin, logPath string, args ...string) *Proc {
	t.Helper()
	p := New(name, bin, logPath, args...)
	p.Start(t)
	return p
}

// Start runs the process, again if it ran before (with the same
// arguments, environment and log); the last run must have exited.
func (p *Proc) Start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil && !closed(p.cur.done) {
		t.Fatalf("start %s: it is still running (pid %d)", p.Name, p.cur.cmd.Process.Pid)
	}
	lf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(lf, "=== test: start %s at %s: %s %s\n", p.Name, time.Now().Format(time.RFC3339Nano), strings.Join(p.Env, " "), strings.Join(p.Args, " "))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	// Pdeathsig: if the test binary dies (a panic, go test's -timeout),
	// its processes die with it rather than linger on the machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("start %s: %v", p.Name, err)
	}
	r := &run{cmd: cmd, done: make(chan struct{})}
	p.cur = r
	go func() {
		cmd.Wait()
		p.mu.Lock()
		how := "unexpectedly"
		if r.expected {
			how = "as the test expected"
		}
		p.mu.Unlock()
		fmt.Fprintf(lf, "=== test: %s exited %s at %s: %s\n", p.Name, how, time.Now().Format(time.RFC3339Nano), cmd.ProcessState)
		lf.Close()
		close(r.done)
	}()
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (p *Proc) run() *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		panic("proctest: " + p.Name + " was never started")
	}
	return p.cur
}

// Exited reports whether the current run has exited.
func (p *Proc) Exited() bool { return closed(p.run().done) }

// State is the current run's exit state, nil while it runs.
func (p *Proc) State() *os.ProcessState {
	r := p.run()
	if !closed(r.done) {
		return nil
	}
	return r.cmd.ProcessState
}

// Pid is the current run's process ID.
func (p *Proc) Pid() int { return p.run().cmd.Process.Pid }

// Crashed reports whether the current run exited without the test asking
// (Kill9, Terminate, Expect).
func (p *Proc) Crashed() bool {
	r := p.run()
	if !closed(r.done) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !r.expected
}

// Expect says the current run may exit: that is not a crash.
func (p *Proc) Expect() {
	r := p.run()
	p.mu.Lock()
	r.expected = true
	p.mu.Unlock()
}

// Kill9 kills the current run with SIGKILL and waits for it. It returns
// the time just before the signal was sent: no effect of the kill (a
// peer seeing the connection end) comes before it.
func (p *Proc) Kill9(t testing.TB) time.Time {
	t.Helper()
	r := p.run()
	p.Expect()
	at := time.Now()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil && !closed(r.done) {
		t.Fatalf("kill -9 %s: %v", p.Name, err)
	}
	<-r.done
	return at
}

// Pause stops the current run with SIGSTOP and returns once every one of
// its threads is stopped. kill(2) returns before that: the kernel wakes
// one thread to take the stop, and it stops the others in turn, so on a
// busy machine a thread of a "stopped" process can still answer a peer for
// milliseconds (a follower acknowledged an entry after kill returned:
// TestOutageRecoveryAllServersDeposedLeaderTail).
func (p *Proc) Pause(t testing.TB) {
	t.Helper()
	pid := p.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", p.Name, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			t.Fatalf("SIGSTOP %s: %v", p.Name, err)
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("SIGSTOP %s: %d threads still not stopped after 10s", p.Name, running)
		}
		time.Sleep(time.Millisecond)
	}
}

// Resume continues a run that Pause stopped.
func (p *Proc) Resume() { syscall.Kill(p.Pid(), syscall.SIGCONT) }

// runningThreads counts pid's threads not in the stopped state ('T', or
// 't' under a tracer) in /proc/pid/task/*/stat.
func runningThreads(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("list threads: %w", err)
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name, which is in parentheses
		// and may itself contain them.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("%s/%s/stat: unexpected %q", dir, task.Name(), b)
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			n++
		}
	}
	return n, nil
}

// Terminate sends SIGTERM to the current run and waits up to bound; then
// SIGQUIT (its goroutine stacks to the log) and, if need be, SIGKILL. It
// reports how long the process took and whether it exited on SIGTERM in
// time.
func (p *Proc) Terminate(bound time.Duration) (time.Duration, bool) {
	r := p.run()
	p.Expect()
	if closed(r.done) {
		return 0, true
	}
	start := time.Now()
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		return time.Since(start), true
	case <-time.After(bound):
	}
	// SIGQUIT first: a Go process writes every goroutine's stack to its
	// log before it exits (GoroutineDump reads it), which says where the
	// shutdown hung; SIGKILL if even that does not end it.
	r.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-r.done:
	case <-time.After(quitGrace):
		r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.done
	}
	return time.Since(start), false
}

// Stop ends the current run with SIGTERM (Terminate, StopBound) and fails
// t, showing the goroutines' stacks, if it did not exit in time. It
// returns how long the process took and whether it exited on SIGTERM.
func (p *Proc) Stop(t testing.TB) (time.Duration, bool) {
	t.Helper()
	took, ok := p.Terminate(StopBound)
	if !ok {
		t.Errorf("%s did not exit within %v of SIGTERM; killed. Its goroutines:\n%s", p.Name, StopBound, GoroutineDump(p.LogPath))
	}
	return took, ok
}

// quitGrace is how long a process that ignored SIGTERM gets to write its
// goroutines' stacks after SIGQUIT.
const quitGrace = 5 * time.Second

// GoroutineDump returns the goroutine stacks a Go process wrote to the
// log at path on SIGQUIT (see Terminate), at most maxDump bytes of them,
// or "" if its last run wrote none.
func GoroutineDump(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if i := bytes.LastIndex(b, []byte("=== test: start ")); i >= 0 {
		b = b[i:]
	}
	i := bytes.Index(b, []byte("SIGQUIT: quit"))
	if i < 0 {
		return ""
	}
	b = b[i:]
	if len(b) > maxDump {
		b = append(b[:maxDump:maxDump], "\n[... cut]"...)
	}
	return string(b)
}

const maxDump = 256 << 10

// WaitExit waits up to timeout for the current run to exit by itself (it
// is expected to: not a crash) and returns its exit state; the test fails,
// the process killed, if it does not.
func (p *Proc) WaitExit(t testing.TB, timeout time.Duration) *os.ProcessState {
	t.Helper()
	r := p.run()
	p.Expect()
	select {
	case <-r.done:
		return r.cmd.ProcessState
	case <-time.After(timeout):
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
	t.Fatalf("%s did not exit within %v; killed. Its log:\n%s", p.Name, timeout, LogTail(p.LogPath, 40))
	return nil
}

// Log returns the whole log of every run so far.
func (p *Proc) Log() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// LogTail returns the last n lines of the log at path.
func LogTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// Poll calls cond every 10ms until it holds, for at most timeout, and
// returns how long that took. It fails the test at once, with the tail of
// the process's log, if one of procs ended without the test asking; and
// with cond's last message if timeout passes.
func Poll(t testing.TB, timeout time.Duration, what string, procs []*Proc, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		if err := crashed(procs); err != "" {
			t.Fatalf("waiting for %s: %s", what, err)
		}
		ok, msg := cond()
		if ok {
			return time.Since(start)
		}
		last = msg
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, last)
	return 0
}

// crashed describes the first of procs that ended without the test
// asking, or is "".
func crashed(procs []*Proc) string {
	for _, p := range procs {
		if p != nil && p.Crashed() {
			return fmt.Sprintf("%s exited unexpectedly: %s; the last %d lines of its log (%s):\n%s",
				p.Name, p.State(), tailLines, p.LogPath, LogTail(p.LogPath, tailLines))
		}
	}
	return ""
}

// tailLines of a process's log are shown when it fails a test.
const tailLines = 60
