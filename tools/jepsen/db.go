package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/plugreg/plugreg/tests/framework/lazyfs"
)

// node is one plugreg agent on its own loopback address, run as one
// process after another (a proc each) as the nemesis kills and restarts it:
// a server (n1, n2, n3) or a client agent (c1, c2, ...: -client, no Raft,
// no apply journal).
type node struct {
	Name    string
	IP      string
	HTTP    string // ip:port
	Dir     string // data dir
	Journal string // apply journal; "" for a client agent
	Log     string // agent output
	Client  bool   // a client agent

	mu     sync.Mutex // guards cur, procs, paused and every proc's fields
	cur    *proc      // the process the harness runs now, or nil
	procs  []*proc    // every process started, in order: the log's "=== harness: start" markers
	paused bool
	// expectNext is the exit status the next process started is
	// expected to end with (expectNextExit).
	expectNext string
}

// proc is one agent process. An exit the harness did not ask for (no
// kill, no SIGTERM) is a failure of the agent: a crash.
type proc struct {
	cmd       *exec.Cmd
	exited    chan struct{}
	start     int64  // run clock
	exit      int64  // run clock, once exited
	status    string // "exit status 2", "signal: killed", ...
	byHarness bool   // the harness killed or stopped it
	crashed   bool   // exited while the harness had not asked it to
	expect    string // an exit status the harness caused (a failed fsync's 65): not a crash
}

// db runs the cluster under test. Processes are numbered as in hosts:
// the servers first (nodes, 0-2), then the client agents (clients, 3 on).
type db struct {
	bin         string
	root        string
	hosts       []*node // every agent: nodes, then clients
	nodes       []*node // the servers
	clients     []*node // the client agents
	httpPort    int
	serverPort  int
	gossipPort  int
	clientHTTP  int // a client agent's HTTP port (on its own address)
	clientGosp  int // a client agent's gossip port
	hbTimeout   time.Duration
	hbFlag      bool // pass -heartbeat-timeout (false: the agent's defaults)
	snapshotThr int
	journalSize int
	hc          *http.Client
	clock       func() int64 // the run's clock, for the process records
	logf        func(format string, args ...interface{})
	mounts      []string // data dirs on a tmpfs of their own (the disk family)
	logStore    string   // every server's Raft log store: wal or boltdb
	walSegment  int      // -wal-segment-size for wal servers (0: the agent's default)
	// traceEndpoint: every agent's -trace-endpoint, every request
	// sampled ("": tracing off, the default).
	traceEndpoint string

	lazy []*lazyfs.Mount // the servers' data dirs, on a lazyfs each (the powerloss family)
}

func newDB(root, bin string, r *runConfig) *db {
	d := &db{bin: bin, root: root, httpPort: r.portBase, serverPort: r.portBase + 1, gossipPort: r.portBase + 2,
		clientHTTP: r.portBase + 3, clientGosp: r.portBase + 4,
		hbTimeout: r.heartbeatTimeout, hbFlag: !r.defaultTimeouts, snapshotThr: r.snapshotThreshold, journalSize: r.journalSize, logStore: r.logStore, walSegment: r.walSegment,
		clock: func() int64 { return 0 }, logf: func(string, ...interface{}) {}}
	if r.defaultTimeouts {
		d.hbTimeout = agentDefaultTimeout // what the nemesis waits on
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("n%d", i+1)
		ip := fmt.Sprintf("127.0.0.%d", i+1)
		d.nodes = append(d.nodes, &node{
			Name: name, IP: ip, HTTP: net.JoinHostPort(ip, strconv.Itoa(d.httpPort)),
			Dir: filepath.Join(root, "data", name), Journal: filepath.Join(root, name+".journal"),
			Log: filepath.Join(root, name+".log"),
		})
	}
	for j := 0; j < r.clientAgents; j++ {
		name := fmt.Sprintf("c%d", j+1)
		ip := fmt.Sprintf("127.0.0.%d", 4+j)
		d.clients = append(d.clients, &node{
			Name: name, IP: ip, HTTP: net.JoinHostPort(ip, strconv.Itoa(d.clientHTTP)),
			Dir: filepath.Join(root, "data", name), Log: filepath.Join(root, name+".log"), Client: true,
		})
	}
	d.hosts = append(append([]*node(nil), d.nodes...), d.clients...)
	d.hc = clientFrom(clientIP, 2*time.Second)
	return d
}

// clientIP is where the harness's own connections come from, so that the
// partition rules between node addresses never catch them.
const clientIP = "127.0.0.100"

func clientFrom(ip string, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: timeout}
	base := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	if secure != nil {
		base.TLSClientConfig = secure.harnessTLS.TLSClientConfig
	}
	return &http.Client{Timeout: timeout, Transport: secureTransport{base: base}}
}

// agentDefaultTimeout is the agent's heartbeat and election timeout
// without -heartbeat-timeout (-raft-multiplier 1).
const agentDefaultTimeout = 500 * time.Millisecond

// compactionLag is how many entries past the trailing logs a leader may
// still send from its log after a snapshot: none with boltdb; with wal,
// what its unsealed tail segment holds (raft-wal serves the tail whole;
// entries are about 150 bytes in the suite), or every entry since the
// start with the agent's 16 MiB segments.
func (d *db) compactionLag() uint64 {
	if d.logStore != "wal" {
		return 0
	}
	if d.walSegment == 0 {
		return 1 << 40
	}
	return uint64(d.walSegment / 150)
}

// args is node n's agent command line.
func (d *db) args(n *node) []string {
	if n.Client {
		// Only the flags a client agent takes: it refuses server flags.
		args := []string{"agent", "-client", "-node", n.Name, "-data-dir", n.Dir, "-bind", n.IP,
			"-http-port", strconv.Itoa(d.clientHTTP), "-gossip-port", strconv.Itoa(d.clientGosp), "-retry-join", "-log-level", "info"}
		for _, o := range d.nodes {
			args = append(args, "-join", net.JoinHostPort(o.IP, strconv.Itoa(d.gossipPort)))
		}
		if secure != nil {
			args = append(args, secure.agentArgs(n)...)
		}
		return append(args, d.traceArgs()...)
	}
	args := []string{"agent", "-node", n.Name, "-data-dir", n.Dir, "-bind", n.IP,
		"-http-port", strconv.Itoa(d.httpPort), "-server-port", strconv.Itoa(d.serverPort), "-gossip-port", strconv.Itoa(d.gossipPort),
		"-bootstrap-expect", "3", "-retry-join", "-apply-log", n.Journal,
		"-snapshot-threshold", strconv.Itoa(d.snapshotThr), "-snapshot-interval", "300ms", "-trailing-logs", "20",
		"-state-check-interval", "2s",
		"-journal-size", strconv.Itoa(d.journalSize), "-node-reap-after", "-1s", "-log-level", "info"}
	args = append(args, "-log-store", d.logStore)
	if d.logStore == "wal" && d.walSegment > 0 {
		args = append(args, "-wal-segment-size", strconv.Itoa(d.walSegment))
	}
	if secure != nil {
		args = append(args, secure.agentArgs(n)...)
	}
	if d.hbFlag {
		args = append(args, "-heartbeat-timeout", d.hbTimeout.String())
	}
	args = append(args, d.traceArgs()...)
	for _, o := range d.nodes {
		if o != n {
			args = append(args, "-join", net.JoinHostPort(o.IP, strconv.Itoa(d.gossipPort)))
		}
	}
	return args
}

// start launches node i on its data dir, unless its process runs.
func (d *db) start(i int) error {
	n := d.hosts[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur != nil && !n.cur.gone() {
		return nil
	}
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s's log: %w", n.Name, err)
	}
	cmd := exec.Command(d.bin, d.args(n)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &proc{cmd: cmd, exited: make(chan struct{}), start: d.clock(), expect: n.expectNext}
	n.expectNext = ""
	// One marker per proc, so that the log scan can tell which process
	// printed what.
	fmt.Fprintf(logf, "\n%s start %s at %s (run time %s)\n", harnessMark, n.Name, time.Now().Format(time.RFC3339Nano), runTime(p.start))
	n.procs = append(n.procs, p)
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.status, p.byHarness = "did not start: "+err.Error(), true
		close(p.exited)
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	n.cur, n.paused = p, false
	go d.reap(n, p, logf)
	return nil
}

// reap waits for p to exit and records how; an exit the harness did not
// cause is reported at once.
func (d *db) reap(n *node, p *proc, logf *os.File) {
	p.cmd.Wait()
	n.mu.Lock()
	p.exit, p.status = d.clock(), p.cmd.ProcessState.String()
	p.crashed = !p.byHarness && (p.expect == "" || p.status != p.expect)
	crashed := p.crashed
	n.mu.Unlock()
	cause := "asked by the harness"
	if crashed {
		cause = "NOT caused by the harness"
		d.logf("%s exited unexpectedly at %s (%s), %s after it started", n.Name, runTime(p.exit), p.status, time.Duration(p.exit-p.start).Round(time.Millisecond))
	}
	fmt.Fprintf(logf, "%s %s exited at run time %s: %s, %s\n", harnessMark, n.Name, runTime(p.exit), p.status, cause)
	logf.Close()
	close(p.exited)
}

// harnessMark starts every line the harness writes into an agent's log.
const harnessMark = "=== harness:"

func runTime(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }

func (p *proc) gone() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// take detaches node i's process for the harness to stop: its exit will
// not count as a crash. It returns nil when none runs.
func (d *db) take(i int) *proc {
	n := d.hosts[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.cur
	n.cur = nil
	if p == nil {
		return nil
	}
	if !p.gone() {
		p.byHarness = true
	}
	return p
}

// status is how node i's last process exited ("" while it runs).
func (d *db) status(i int) string {
	n := d.hosts[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.procs) == 0 {
		return ""
	}
	p := n.procs[len(n.procs)-1]
	if !p.gone() {
		return ""
	}
	return p.status
}

// expectExit says that node i's process is about to exit by itself with
// status (as "exit status 65"), because of a fault the harness injects:
// that exit is not a crash. It returns whether a process runs.
func (d *db) expectExit(i int, status string) bool {
	n := d.hosts[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil || n.cur.gone() {
		return false
	}
	n.cur.expect = status
	return true
}

// expectNextExit says that the next process started on node i will exit
// by itself with status, as expectExit says of the one running.
func (d *db) expectNextExit(i int, status string) {
	n := d.hosts[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	n.expectNext = status
}

// kill sends SIGKILL and waits until the process is gone.
func (d *db) kill(i int) error {
	p := d.take(i)
	if p == nil || p.gone() {
		return nil // never signal a reaped process's ID: it may be another's now
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("kill %s: still running after 10s", d.hosts[i].Name)
	}
}

func (d *db) running(i int) bool {
	n := d.hosts[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur != nil && !n.cur.gone()
}

// pid is node i's process ID, or 0 when it does not run.
func (d *db) pid(i int) int {
	n := d.hosts[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil || n.cur.gone() {
		return 0
	}
	return n.cur.cmd.Process.Pid
}

func (d *db) signal(i int, sig syscall.Signal) error {
	n := d.hosts[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil || n.cur.gone() {
		return fmt.Errorf("%s is not running", n.Name) // and its process ID may be another's now
	}
	n.paused = sig == syscall.SIGSTOP
	return syscall.Kill(-n.cur.cmd.Process.Pid, sig)
}

func (d *db) pause(i int) error  { return d.signal(i, syscall.SIGSTOP) }
func (d *db) resume(i int) error { return d.signal(i, syscall.SIGCONT) }

// wipe empties node i's data dir (its apply journal stays: it is
// history). The dir itself stays: it may be a mount point.
func (d *db) wipe(i int) error {
	entries, err := os.ReadDir(d.nodes[i].Dir)
	if err != nil {
		return fmt.Errorf("wipe %s: %w", d.nodes[i].Name, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(d.nodes[i].Dir, e.Name())); err != nil {
			return fmt.Errorf("wipe %s: %w", d.nodes[i].Name, err)
		}
	}
	return nil
}

// stopAll kills every node, resuming paused ones first: the cleanup after
// an error. A healthy run ends with terminateAll.
func (d *db) stopAll() {
	for i := range d.hosts {
		d.resume(i)
		d.kill(i)
	}
}

// crash is a process that exited without the harness asking it to.
type crash struct {
	Node        string
	Proc        int // the proc's number on its node, from 0
	Start, Exit int64
	Status      string
}

// crashes lists every unexpected exit so far.
func (d *db) crashes() []crash {
	var cs []crash
	for _, n := range d.hosts {
		n.mu.Lock()
		for k, p := range n.procs {
			if p.crashed {
				cs = append(cs, crash{Node: n.Name, Proc: k, Start: p.start, Exit: p.exit, Status: p.status})
			}
		}
		n.mu.Unlock()
	}
	return cs
}

// procStarts is the start time of each of node n's processes.
func (d *db) procStarts(n *node) []int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ts []int64
	for _, p := range n.procs {
		ts = append(ts, p.start)
	}
	return ts
}

// health is GET /v1/health.
type health struct {
	Status            string // a client agent: "ok" once a server answers and knows a leader
	KnownServers      int    // a client agent: the servers it knows alive
	Node              string
	Leader            string
	AppliedIndex      uint64
	RaftState         string
	Term              uint64
	CommitIndex       uint64
	LastSnapshotIndex uint64
}

func (d *db) health(ctx context.Context, i int) (*health, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.hosts[i].HTTP+"/v1/health", nil)
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var h health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return nil, err
	}
	return &h, nil
}

// leader returns the index of the node that says it leads (the highest
// term wins), or -1.
func (d *db) leader(ctx context.Context) (int, uint64) {
	best, term := -1, uint64(0)
	for i := range d.nodes {
		if h, err := d.health(ctx, i); err == nil && h.RaftState == "Leader" && h.Term >= term {
			best, term = i, h.Term
		}
	}
	return best, term
}

// waitLeader waits until some node leads and every running node knows it.
func (d *db) waitLeader(ctx context.Context, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l, _ := d.leader(ctx); l >= 0 {
			agree := true
			for i := range d.nodes {
				if !d.running(i) {
					continue
				}
				h, err := d.health(ctx, i)
				if err != nil || h.Leader == "" {
					agree = false
				}
			}
			if agree {
				return l, nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return -1, errors.New("no leader")
}

// operator sends an operator request to node i.
func (d *db) operator(ctx context.Context, i int, method, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+d.nodes[i].HTTP+path, nil)
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&b)
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b.Error)
	}
	return nil
}

// clientIndex is client agent j's process number (its index in hosts).
func (d *db) clientIndex(j int) int { return len(d.nodes) + j }

// waitClients waits until every running client agent says it is healthy:
// a server answers it and knows a leader.
func (d *db) waitClients(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var notYet []string
		for j, c := range d.clients {
			i := d.clientIndex(j)
			if !d.running(i) {
				continue
			}
			if h, err := d.health(ctx, i); err != nil || h.Status != "ok" {
				notYet = append(notYet, c.Name)
			}
		}
		if len(notYet) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("client agents %v not healthy after %v", notYet, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// traceArgs are the tracing flags of every agent (none with tracing off).
func (d *db) traceArgs() []string {
	if d.traceEndpoint == "" {
		return nil
	}
	return []string{"-trace-endpoint", d.traceEndpoint, "-trace-sample-rate", "1"}
}
