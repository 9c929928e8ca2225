package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process (an etcd member or a plugreg agent). Its
// output goes to a log file in the bench's temp dir, kept for post-mortems
// until the dir is removed.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string // added to the bench's environment
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has been reaped
	// paused: pause stopped the current process and resume has not
	// continued it yet.
	paused bool
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: open log: %w", p.name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	// Own process group: a Ctrl-C in the terminal reaches only the bench,
	// which then stops the children itself, in order, and removes their
	// data; the children never see a signal we did not send.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start %s: %w", p.name, p.path, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.cmd, p.done, p.paused = cmd, done, false
	return nil
}

// pause stops the process with SIGSTOP and returns once every one of its
// threads is stopped: kill(2) returns before that (the kernel stops the
// threads one after the other), and a thread still running could answer
// a peer or a client. A process that is gone needs no pause.
func (p *proc) pause() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd != nil {
		p.paused = true
	}
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil // already reaped
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			return nil
		default:
		}
		n, err := runningThreads(cmd.Process.Pid)
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d threads still running 10s after SIGSTOP", p.name, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// resume continues a process that pause stopped.
func (p *proc) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused && p.cmd != nil {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.paused = false
}

// runningThreads counts pid's threads not in the stopped state ('T', or
// 't' under a tracer) in /proc/PID/task/*/stat.
func runningThreads(pid int) (int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("threads of %d: %w", pid, err)
	}
	n := 0
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name, which is in parentheses
		// and may hold some itself.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("%s/%s/stat: unexpected %q", dir, t.Name(), b)
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			n++
		}
	}
	return n, nil
}

// running reports whether the process has been started and not reaped.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill sends SIGKILL (the failover test's crash) and waits for the exit.
func (p *proc) kill() {
	p.signalAndWait(syscall.SIGKILL, 0)
}

// stop asks the process to exit (SIGTERM) and kills it after grace.
func (p *proc) stop(grace time.Duration) {
	p.signalAndWait(syscall.SIGTERM, grace)
}

func (p *proc) signalAndWait(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	// A paused process would hold SIGTERM until continued: every way
	// out (the end, an error, Ctrl-C) continues it here.
	p.resume()
	cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		select {
		case <-done:
			return
		case <-time.After(grace):
		}
		cmd.Process.Signal(syscall.SIGKILL)
	}
	<-done
}

// benchCPU is the CPU time this process (the load generator) has used;
// zero if /proc cannot say.
func benchCPU() time.Duration {
	d, _ := cpuTime(os.Getpid())
	return d
}

// cpuTime is the user+system CPU time pid has used, from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields count from the
	// closing parenthesis.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat utime/stime", pid)
	}
	// USER_HZ is 100 on every Linux the bench targets.
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// clusterCPU sums the CPU time of a system's three server processes.
func clusterCPU(s system) time.Duration {
	var sum time.Duration
	for i := 0; i < members; i++ {
		if d, err := cpuTime(s.pid(i)); err == nil {
			sum += d
		}
	}
	return sum
}

// procStatus reads a size field (VmRSS:, VmHWM:) of pid from /proc, in
// bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read status of %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s %q: %w", field, rest, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// ensureEtcd returns the path of the etcd binary, installing Debian's
// etcd-server package when there is none.
func ensureEtcd(logf func(string, ...any)) (string, error) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	logf("etcd not found: apt-get install -y etcd-server")
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	install := func() error {
		cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "etcd-server")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get install etcd-server: %w\n%s", err, tail(out, 2000))
		}
		return nil
	}
	if err := install(); err != nil {
		// A fresh machine may have no package lists yet.
		upd := exec.Command("apt-get", "update")
		upd.Env = env
		if out, uerr := upd.CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %w\n%s", uerr, tail(out, 2000))
		}
		if err := install(); err != nil {
			return "", err
		}
	}
	// The package enables a systemd unit on machines that run systemd; the
	// bench starts its own members on other ports, so the two never meet.
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcd-server installed but no etcd on PATH: %w", err)
	}
	return p, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
