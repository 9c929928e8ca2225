package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// stopped is how one agent took the SIGTERM that ends a run.
type stopped struct {
	Node       string
	Took       time.Duration // from SIGTERM to exit
	Status     string        // its exit status
	Hung       bool          // still running termGrace after SIGTERM
	Dump       string        // the goroutine dump's file, when it hung
	Highlights []string      // what the dump says it waits on
}

// termGrace is how long an agent has to exit after SIGTERM, as a service
// manager would give it before SIGKILL.
const termGrace = 10 * time.Second

// terminateAll stops every running agent the way an operator does: SIGTERM
// to all of them (servers and client agents) at once, and each must be
// gone within termGrace. One that is not gets a SIGQUIT first (the Go runtime prints every goroutine's stack
// and exits), so the results say where it was stuck, then SIGKILL.
func (d *db) terminateAll() []stopped {
	out := make([]*stopped, len(d.hosts))
	var wg sync.WaitGroup
	for i := range d.hosts {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i] = d.terminate(i)
		}(i)
	}
	wg.Wait()
	var res []stopped
	for _, s := range out {
		if s != nil {
			res = append(res, *s)
		}
	}
	return res
}

func (d *db) terminate(i int) *stopped {
	n := d.hosts[i]
	d.resume(i) // a paused process cannot take a signal's handler
	p := d.take(i)
	if p == nil || p.gone() {
		return nil // not running: a crash, reported as one
	}
	s := &stopped{Node: n.Name}
	t0 := time.Now()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(termGrace):
		s.Hung = true
		s.Dump, s.Highlights = d.dumpGoroutines(n, p)
		if !p.gone() { // the SIGQUIT usually ends it
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
	}
	s.Took = time.Since(t0)
	n.mu.Lock()
	s.Status = p.status
	n.mu.Unlock()
	if s.Status == "" {
		s.Status = "still running after SIGKILL"
	}
	return s
}

// dumpGoroutines sends p SIGQUIT, waits for its dump to reach the log, and
// copies the dump to <node>.goroutines.txt. It returns the file's name and
// the dump's highlights.
func (d *db) dumpGoroutines(n *node, p *proc) (string, []string) {
	from := int64(0)
	if fi, err := os.Stat(n.Log); err == nil {
		from = fi.Size()
	}
	if f, err := os.OpenFile(n.Log, os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "\n%s SIGQUIT %s: still running %v after SIGTERM; its goroutines follow\n", harnessMark, n.Name, termGrace)
		f.Close()
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGQUIT)
	select { // the runtime exits once it has printed every stack
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
	dump, err := readFrom(n.Log, from)
	if err != nil {
		return "", []string{fmt.Sprintf("reading the dump: %v", err)}
	}
	name := n.Name + ".goroutines.txt"
	if err := os.WriteFile(filepath.Join(d.root, name), dump, 0o644); err != nil {
		return "", []string{fmt.Sprintf("writing the dump: %v", err)}
	}
	return name, dumpHighlights(string(dump))
}

func readFrom(path string, off int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// shutdownViolations: an agent still running termGrace after SIGTERM fails
// the run; a non-zero exit status after SIGTERM is only worth a line in the
// summary (summarize prints every stop).
func shutdownViolations(ss []stopped) []check.Violation {
	var vs []check.Violation
	for _, s := range ss {
		if !s.Hung {
			continue
		}
		detail := fmt.Sprintf("%s still running %v after SIGTERM (SIGQUIT then SIGKILL: %s); goroutines in %s", s.Node, termGrace, s.Status, s.Dump)
		if len(s.Highlights) > 0 {
			detail += "; " + s.Highlights[0]
		}
		vs = append(vs, check.Violation{Checker: "shutdown", Detail: detail})
	}
	return vs
}
