package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// logPanic is a panic or a fatal error an agent printed.
type logPanic struct {
	Line  int      // in the log, from 1
	Proc  int      // which of the node's processes printed it (harness start markers before it, less one)
	Lines []string // the report: the panic line and what follows it, up to maxPanicLines
}

const maxPanicLines = 40

// panicMarks are what the Go runtime prints for an unrecovered panic or a
// fatal error (concurrent map writes, deadlock, out of memory), what
// net/http logs for a handler panic it recovered, and what a Raft snapshot
// that fsm.WriteState refused logs: the state in memory breaks an
// invariant the snapshot reader checks, which no fault can cause (a full
// disk fails a snapshot with another error). Such a node can take no
// snapshot again, and a follower that needs one gets none. And what a
// server logs when its registry's digest differs from another server's at
// the same index (cluster's state check): replicas that diverged.
var panicMarks = []string{"panic:", "fatal error:", "http: panic serving", "would not read back", "registry differs from another server's"}

// logLine matches a line the agent's logger wrote (hclog starts every line
// with a timestamp); a traceback's lines never look like one.
var logLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d`)

// scanPanics finds every panic report in an agent's log. A report runs
// from the line with the mark to the next logger or harness line, so a
// traceback that prints "panic:" again (a panic while panicking) is one
// report. What follows a harness SIGQUIT marker is a goroutine dump the
// harness asked for, not the agent's doing, and is not scanned.
func scanPanics(r io.Reader) ([]logPanic, error) {
	var (
		out  []logPanic
		cur  *logPanic
		proc = -1
		line int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, harnessMark+" start "):
			proc++
			cur = nil
			continue
		case strings.HasPrefix(l, harnessMark+" SIGQUIT"):
			cur = nil
			for sc.Scan() { // skip the dump, up to the next process
				line++
				if strings.HasPrefix(sc.Text(), harnessMark+" start ") {
					proc++
					break
				}
			}
			continue
		case strings.HasPrefix(l, harnessMark), logLine.MatchString(l):
			cur = nil
			if !hasPanicMark(l) {
				continue
			}
		case cur != nil:
			if len(cur.Lines) < maxPanicLines {
				cur.Lines = append(cur.Lines, l)
			}
			continue
		}
		if hasPanicMark(l) {
			out = append(out, logPanic{Line: line, Proc: max(proc, 0), Lines: []string{l}})
			cur = &out[len(out)-1]
		}
	}
	return out, sc.Err()
}

func hasPanicMark(l string) bool {
	for _, m := range panicMarks {
		if strings.Contains(l, m) {
			return true
		}
	}
	return false
}

// brief is a report in one line: the message, then the innermost frames
// of the goroutine that panicked, callers after "<-".
func (p logPanic) brief() string {
	msg := strings.TrimSpace(p.Lines[0])
	var frames []string
	stack := 0 // 0: before the first goroutine's header, 1: in its stack, 2: past it
	for _, l := range p.Lines[1:] {
		switch {
		case stack == 0 && strings.HasPrefix(l, "[signal "):
			msg += " " + strings.TrimSpace(l)
		case strings.HasPrefix(l, "goroutine "):
			stack++
		case stack == 1 && l == "":
			stack = 2
		case stack == 1 && !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "created by ") && len(frames) < 6:
			frames = append(frames, funcName(l))
		}
	}
	if len(frames) == 0 {
		return msg
	}
	return msg + " at " + strings.Join(frames, " <- ")
}

// funcName strips a traceback frame's arguments.
func funcName(frame string) string {
	frame = strings.TrimSpace(frame)
	if strings.HasSuffix(frame, ")") {
		if i := strings.LastIndex(frame, "("); i > 0 {
			frame = frame[:i]
		}
	}
	return frame
}

// agentFailures turns the process watch's crashes and the panics in the
// agents' logs into violations: one per process that crashed or panicked,
// with the node, the times and the start of the report.
func agentFailures(d *db) []check.Violation {
	var vs []check.Violation
	crashes := d.crashes()
	for _, n := range d.hosts {
		starts := d.procStarts(n)
		startAt := func(k int) string {
			if k < len(starts) {
				return fmt.Sprintf("%.1fs", float64(starts[k])/1e9)
			}
			return "?"
		}
		panics, err := scanLog(n.Log)
		if err != nil {
			vs = append(vs, check.Violation{Checker: "agent", Detail: fmt.Sprintf("%s: scanning the log: %v", n.Name, err)})
		}
		byProc := map[int][]logPanic{}
		for _, p := range panics {
			byProc[p.Proc] = append(byProc[p.Proc], p)
		}
		for _, c := range crashes {
			if c.Node != n.Name {
				continue
			}
			detail := fmt.Sprintf("%s process %d (started %s) exited unexpectedly at %.1fs (%s)", n.Name, c.Proc, startAt(c.Proc), float64(c.Exit)/1e9, c.Status)
			if ps := byProc[c.Proc]; len(ps) > 0 {
				detail += fmt.Sprintf(": log line %d: %s", ps[0].Line, ps[0].brief())
				delete(byProc, c.Proc)
			}
			vs = append(vs, check.Violation{Checker: "agent", Detail: detail})
		}
		for k := range starts {
			for _, p := range byProc[k] {
				vs = append(vs, check.Violation{Checker: "agent", Detail: fmt.Sprintf("%s process %d (started %s) logged at line %d: %s", n.Name, k, startAt(k), p.Line, p.brief())})
			}
		}
	}
	return vs
}

func scanLog(path string) ([]logPanic, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return scanPanics(f)
}

// dumpHighlights picks, from a SIGQUIT goroutine dump, the goroutines that
// say why a process would not exit: the main goroutine, and any in a
// shutdown or in Raft's pipeline replication (where hashicorp/raft is known
// to wedge). Each comes as one line: its header and its innermost frames
// outside the runtime, callers after "<-".
func dumpHighlights(dump string) []string {
	var out []string
	for _, g := range strings.Split(dump, "\n\n") {
		lines := strings.Split(strings.TrimSpace(g), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		header := goroutineIDs.ReplaceAllString(strings.TrimSuffix(lines[0], ":"), "")
		if !strings.HasPrefix(header, "goroutine 1 ") && !strings.Contains(g, "Shutdown") && !strings.Contains(g, "ipeline") {
			continue
		}
		var frames []string
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by ") || len(frames) == 5 {
				continue
			}
			if f := funcName(l); len(frames) > 0 || !runtimeFrame(f) {
				frames = append(frames, f)
			}
		}
		out = append(out, header+": "+strings.Join(frames, " <- "))
	}
	return out
}

// goroutineIDs are the runtime's addresses in a goroutine's header
// (GOTRACEBACK=system and newer Go versions print them).
var goroutineIDs = regexp.MustCompile(` (gp|m|mp)=\S+`)

// runtimeFrame: the runtime's own frames on top of a parked goroutine say
// only that it is parked.
func runtimeFrame(f string) bool {
	return strings.HasPrefix(f, "runtime.") || strings.HasPrefix(f, "sync.runtime_") || strings.HasPrefix(f, "internal/")
}
