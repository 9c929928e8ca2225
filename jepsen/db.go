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
)

// node is one plugreg agent process on its own loopback address.
type node struct {
	Name    string
	IP      string
	HTTP    string // ip:port
	Dir     string // data dir
	Journal string // apply journal
	Log     string // agent output

	mu     sync.Mutex // guards cmd, exited, paused
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// db runs the cluster under test.
type db struct {
	bin         string
	root        string
	nodes       []*node
	httpPort    int
	serverPort  int
	gossipPort  int
	hbTimeout   time.Duration
	hbFlag      bool // pass -heartbeat-timeout (false: the agent's defaults)
	snapshotThr int
	journalSize int
	hc          *http.Client
}

func newDB(root, bin string, r *runConfig) *db {
	d := &db{bin: bin, root: root, httpPort: r.portBase, serverPort: r.portBase + 1, gossipPort: r.portBase + 2,
		hbTimeout: r.heartbeatTimeout, hbFlag: !r.defaultTimeouts, snapshotThr: r.snapshotThreshold, journalSize: r.journalSize}
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
	d.hc = clientFrom(clientIP, 2*time.Second)
	return d
}

// clientIP is where the harness's own connections come from, so that the
// partition rules between node addresses never catch them.
const clientIP = "127.0.0.100"

func clientFrom(ip string, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: timeout}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 16,
			IdleConnTimeout: 30 * time.Second},
	}
}

// agentDefaultTimeout is the agent's heartbeat and election timeout
// without -heartbeat-timeout (-raft-multiplier 1).
const agentDefaultTimeout = time.Second

// args is node n's agent command line.
func (d *db) args(n *node) []string {
	args := []string{"agent", "-node", n.Name, "-data-dir", n.Dir, "-bind", n.IP,
		"-http-port", strconv.Itoa(d.httpPort), "-server-port", strconv.Itoa(d.serverPort), "-gossip-port", strconv.Itoa(d.gossipPort),
		"-bootstrap-expect", "3", "-retry-join", "-apply-journal", n.Journal,
		"-snapshot-threshold", strconv.Itoa(d.snapshotThr), "-snapshot-interval", "300ms", "-trailing-logs", "20",
		"-journal-size", strconv.Itoa(d.journalSize), "-node-reap-after", "-1s", "-log-level", "info"}
	if d.hbFlag {
		args = append(args, "-heartbeat-timeout", d.hbTimeout.String())
	}
	for _, o := range d.nodes {
		if o != n {
			args = append(args, "-join", net.JoinHostPort(o.IP, strconv.Itoa(d.gossipPort)))
		}
	}
	return args
}

// start launches node i on its data dir.
func (d *db) start(i int) error {
	n := d.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(d.bin, d.args(n)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(logf, "\n=== harness: start %s at %s\n", n.Name, time.Now().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	n.cmd, n.exited, n.paused = cmd, make(chan struct{}), false
	go func(cmd *exec.Cmd, exited chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(exited)
	}(cmd, n.exited)
	return nil
}

// kill sends SIGKILL and waits until the process is gone.
func (d *db) kill(i int) error {
	n := d.nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("kill %s: still running after 10s", n.Name)
	}
}

func (d *db) running(i int) bool {
	n := d.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (d *db) signal(i int, sig syscall.Signal) error {
	n := d.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("%s is not running", n.Name)
	}
	n.paused = sig == syscall.SIGSTOP
	return syscall.Kill(-n.cmd.Process.Pid, sig)
}

func (d *db) pause(i int) error  { return d.signal(i, syscall.SIGSTOP) }
func (d *db) resume(i int) error { return d.signal(i, syscall.SIGCONT) }

// wipe removes node i's data dir (its apply journal stays: it is history).
func (d *db) wipe(i int) error { return os.RemoveAll(d.nodes[i].Dir) }

// stopAll kills every node, resuming paused ones first.
func (d *db) stopAll() {
	for i := range d.nodes {
		d.resume(i)
		d.kill(i)
	}
}

// health is GET /v1/health.
type health struct {
	Status            string
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
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.nodes[i].HTTP+"/v1/health", nil)
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
