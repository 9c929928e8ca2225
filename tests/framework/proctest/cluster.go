//go:build linux

package proctest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
)

const (
	// Wait bounds Cluster.Poll: generous, for shared machines; nothing
	// asserts speed.
	Wait = 30 * time.Second
	// StopBound: an agent must exit this soon after SIGTERM.
	StopBound = 15 * time.Second
)

// Agent is one plugreg agent process: a server or a client agent.
type Agent struct {
	*Proc
	Node    string
	DataDir string
	HTTP    string // host:port of its HTTP API
	Gossip  string // host:port of its gossip (memberlist, TCP and UDP)
	// API talks to this agent only: with QueryOptions.Stale, a server
	// answers from its own replica.
	API *client.Client
}

// ClusterConfig configures StartCluster.
type ClusterConfig struct {
	// Bin is the plugreg binary (empty: Build(t, "./cmd/plugreg")).
	Bin string
	// Dir holds the agents' data dirs and logs (empty: t.TempDir()). An
	// agent's default plugin socket, DATA-DIR/plugin.sock, must fit a
	// unix socket's 107 bytes: with a deep Dir, pass -plugin-socket.
	Dir string
	// ServerIPs are the servers' loopback addresses, one per server
	// (empty: three servers on 127.0.0.1).
	ServerIPs []string
	// ServerArgs are added to every server's flags (-node-reap-after, ...).
	ServerArgs []string
	// ClientTLS, when set, is the TLS of every Agent.API (agents that
	// serve HTTPS).
	ClientTLS *tls.Config
}

// Cluster is plugreg agent processes: servers bootstrapping one cluster
// (-bootstrap-expect), and client agents joined to them. Processes the
// test runs alongside (Track) are watched by Poll and checked at the end
// too.
type Cluster struct {
	Bin     string
	Dir     string
	Servers []*Agent
	Clients []*Agent

	tls *tls.Config // of the agents' APIs; nil: plain HTTP

	mu      sync.Mutex
	tracked []*Proc
	ports   map[string]map[int]bool // handed out, by IP: not handed out again
}

// StartCluster starts the servers (use WaitReady before talking to them).
// t's cleanups then stop every agent with SIGTERM (the client agents
// first, then the servers all at once, as an init system stopping a
// machine would not), each of which must exit with status 0 within
// StopBound; fail the test if an agent or a tracked process had ended
// unasked, or if the race detector reported a race in any log; and print
// the tails of the agents' logs if the test failed.
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Bin == "" {
		cfg.Bin = Build(t, "./cmd/plugreg")
	}
	if len(cfg.ServerIPs) == 0 {
		cfg.ServerIPs = []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}
	}
	c := &Cluster{Bin: cfg.Bin, Dir: cfg.Dir, ports: make(map[string]map[int]bool), tls: cfg.ClientTLS}
	t.Cleanup(func() { c.report(t) }) // runs last: after every process has stopped

	// Every port of one IP from one FreePorts call (see FreePorts).
	perIP := map[string]int{}
	for _, ip := range cfg.ServerIPs {
		perIP[ip] += 3
	}
	free := map[string][]int{}
	for ip, n := range perIP {
		free[ip] = c.freePorts(t, ip, n)
	}
	for i, ip := range cfg.ServerIPs {
		p := free[ip][:3]
		free[ip] = free[ip][3:]
		name := fmt.Sprintf("server-%d", i+1)
		a := &Agent{Node: name, DataDir: filepath.Join(c.Dir, name),
			HTTP: net.JoinHostPort(ip, strconv.Itoa(p[0])), Gossip: net.JoinHostPort(ip, strconv.Itoa(p[2]))}
		a.Proc = New(name, c.Bin, filepath.Join(c.Dir, name+".log"), "agent", "-node", name, "-data-dir", a.DataDir,
			"-bind", ip, "-http-port", strconv.Itoa(p[0]), "-server-port", strconv.Itoa(p[1]),
			"-gossip-port", strconv.Itoa(p[2]), "-bootstrap-expect", strconv.Itoa(len(cfg.ServerIPs)), "-retry-join",
			"-log-level", "debug")
		a.Args = append(a.Args, cfg.ServerArgs...)
		c.Servers = append(c.Servers, a)
	}
	for i, a := range c.Servers {
		for j, o := range c.Servers {
			if j != i {
				a.Args = append(a.Args, "-join", o.Gossip)
			}
		}
		a.API = c.newClient(t, a.HTTP)
		a.Start(t)
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, a := range c.Servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.stop(t)
			}()
		}
		wg.Wait()
	})
	return c
}

// StartClient starts a client agent named name on ip, joined to every
// server, with more flags in args (-plugins-dir, -plugin-socket, ...).
// t's cleanup stops it (see StartCluster).
func (c *Cluster) StartClient(t testing.TB, name, ip string, args ...string) *Agent {
	t.Helper()
	p := c.freePorts(t, ip, 2)
	a := &Agent{Node: name, DataDir: filepath.Join(c.Dir, name),
		HTTP: net.JoinHostPort(ip, strconv.Itoa(p[0])), Gossip: net.JoinHostPort(ip, strconv.Itoa(p[1]))}
	a.Proc = New(name, c.Bin, filepath.Join(c.Dir, name+".log"), "agent", "-client", "-node", name, "-data-dir", a.DataDir,
		"-bind", ip, "-http-port", strconv.Itoa(p[0]), "-gossip-port", strconv.Itoa(p[1]), "-retry-join", "-log-level", "debug")
	for _, s := range c.Servers {
		a.Args = append(a.Args, "-join", s.Gossip)
	}
	a.Args = append(a.Args, args...)
	a.API = c.newClient(t, a.HTTP)
	c.Clients = append(c.Clients, a)
	a.Start(t)
	t.Cleanup(func() { a.stop(t) }) // before the servers'
	return a
}

func (c *Cluster) newClient(t testing.TB, addr string) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Addrs: []string{addr}, TLS: c.tls})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// freePorts is FreePorts without the ports the cluster handed out before
// (an agent started a moment ago may not have bound them yet).
func (c *Cluster) freePorts(t testing.TB, ip string, n int) []int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	used := c.ports[ip]
	if used == nil {
		used = map[int]bool{}
		c.ports[ip] = used
	}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 10 {
			t.Fatalf("no %d free ports on %s", n, ip)
		}
		for _, p := range FreePorts(t, ip, n-len(out)) {
			if !used[p] {
				used[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// stop ends a with SIGTERM at the end of the test (see StartCluster).
func (a *Agent) stop(t testing.TB) {
	if a.Crashed() {
		t.Errorf("%s had exited unexpectedly: %s", a.Name, a.State())
		return
	}
	if a.Exited() { // killed by the test and not started again
		return
	}
	took, ok := a.Stop(t)
	if !ok {
		return
	}
	t.Logf("%s exited %v after SIGTERM: %s", a.Name, took.Round(time.Millisecond), a.State())
	if a.State().ExitCode() != 0 {
		t.Errorf("%s exited with %s after SIGTERM; want 0", a.Name, a.State())
	}
}

// report is the last cleanup: processes that ended unasked, races, and
// the agents' log tails when the test failed.
func (c *Cluster) report(t testing.TB) {
	for _, p := range c.Tracked() {
		if p.Crashed() {
			t.Errorf("%s", crashed([]*Proc{p}))
		}
	}
	if t.Failed() {
		for _, a := range c.Agents() {
			t.Logf("--- last %d lines of %s:\n%s", tailLines, a.LogPath, LogTail(a.LogPath, tailLines))
		}
	}
	if RaceEnabled {
		for _, l := range c.Logs() {
			if b, _ := os.ReadFile(l); strings.Contains(string(b), "WARNING: DATA RACE") {
				t.Errorf("%s: the race detector reported a data race:\n%s", l, LogTail(l, 200))
			}
		}
	}
}

// Track adds processes the test runs alongside the agents: Poll fails if
// one ends unasked, and so does the end of the test; the race detector's
// reports in their logs fail the test too.
func (c *Cluster) Track(ps ...*Proc) {
	c.mu.Lock()
	c.tracked = append(c.tracked, ps...)
	c.mu.Unlock()
}

// Tracked returns the processes given to Track.
func (c *Cluster) Tracked() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tracked)
}

// Agents are the servers, then the client agents.
func (c *Cluster) Agents() []*Agent {
	return append(slices.Clone(c.Servers), c.Clients...)
}

// Procs are the agents' processes and the tracked ones.
func (c *Cluster) Procs() []*Proc {
	var ps []*Proc
	for _, a := range c.Agents() {
		ps = append(ps, a.Proc)
	}
	return append(ps, c.Tracked()...)
}

// Logs are the log files of every process of Procs.
func (c *Cluster) Logs() []string {
	var ls []string
	for _, p := range c.Procs() {
		if !slices.Contains(ls, p.LogPath) {
			ls = append(ls, p.LogPath)
		}
	}
	return ls
}

// Poll is Poll for at most Wait, watching every process of Procs.
func (c *Cluster) Poll(t testing.TB, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	return Poll(t, Wait, what, c.Procs(), cond)
}

// WaitReady waits until every server knows the leader and every client
// agent answers a linearizable read (it found a server through gossip).
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	start := time.Now()
	c.Poll(t, "a leader known to every server", func() (bool, string) {
		for _, s := range c.Servers {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			l, err := s.API.Leader(ctx)
			cancel()
			if err != nil || l == "" {
				return false, fmt.Sprintf("%s: leader %q, %v", s.Name, l, err)
			}
		}
		return true, ""
	})
	c.Poll(t, "every client agent serving reads through the servers", func() (bool, string) {
		for _, a := range c.Clients {
			if err := a.linearizableRead(); err != nil {
				return false, fmt.Sprintf("%s: %v", a.Name, err)
			}
		}
		return true, ""
	})
	t.Logf("%d servers and %d client agents ready in %v", len(c.Servers), len(c.Clients), time.Since(start).Round(time.Millisecond))
}

// linearizableRead lists a type nobody registers: the answer (not found)
// comes from the leader.
func (a *Agent) linearizableRead() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _, err := a.API.List(ctx, "proctest-ready", nil)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}
