// Package testcluster starts real plugreg clusters in-process for tests:
// real Raft with boltdb files in t.TempDir(), memberlist, TCP on loopback,
// and the HTTP API, in the spirit of hashicorp/raft's MakeCluster. Every
// node gets its own loopback address (127.X.Y.N), unique to the process and
// the cluster, so packet filters can partition nodes from each other
// without touching other tests.
package testcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testlog"
	"github.com/plugreg/plugreg/ui"
)

// Node is one server with its HTTP API.
type Node struct {
	*cluster.Server
	Config   *cluster.Config
	IP       string
	HTTP     *httpapi.Server
	HTTPURL  string // http://ip:port
	ln       net.Listener
	serveWG  sync.WaitGroup
	httpPort int
	running  bool
	opts     Options
}

// Cluster is a set of in-process nodes.
type Cluster struct {
	t       testing.TB
	Nodes   []*Node
	Clients []*ClientNode
	base    string // "127.X.Y."
	root    string // data dirs
	opts    Options
	expect  int // BootstrapExpect of the servers New starts
	log     *testlog.Writer
}

// AddServer starts one more server, joined to the first, with the same
// options (and BootstrapExpect) as New's.
func (c *Cluster) AddServer() *Node {
	c.t.Helper()
	return c.addServer()
}

func (c *Cluster) addServer() *Node {
	c.t.Helper()
	i := len(c.Nodes)
	ip := c.base + strconv.Itoa(i+1)
	cfg := cluster.DefaultConfig()
	cfg.NodeID = fmt.Sprintf("node%d", i+1)
	cfg.DataDir = filepath.Join(c.root, cfg.NodeID)
	cfg.BindAddr = ip
	cfg.ServerPort, cfg.GossipPort = 0, 0
	cfg.BootstrapExpect = c.expect
	if i > 0 {
		cfg.Join = []string{c.Nodes[0].GossipAddr()}
	}
	cfg.HeartbeatTimeout = 500 * time.Millisecond
	cfg.ElectionTimeout = 500 * time.Millisecond
	cfg.LeaderLeaseTimeout = 250 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.ReconcileInterval = 200 * time.Millisecond
	cfg.RetryJoin = true
	cfg.RetryInterval = 100 * time.Millisecond
	cfg.GossipFast = true
	cfg.Logger = c.log.Logger("plugreg", hclog.Warn)
	cfg.ACLEnabled, cfg.ACLDefaultDeny = c.opts.ACL.Enabled, c.opts.ACL.DefaultDeny
	if c.opts.GossipKey != "" {
		// Each node its own keyring, in its data dir, as each agent has.
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			c.t.Fatalf("gossip key: %v", err)
		}
		kr, _, err := gossip.OpenKeyring(filepath.Join(cfg.DataDir, gossip.KeyringFileName), c.opts.GossipKey)
		if err != nil {
			c.t.Fatalf("gossip key: %v", err)
		}
		cfg.GossipEncryption = gossip.Encryption{Keyring: kr}
	}
	if c.opts.Modify != nil {
		c.opts.Modify(i, cfg)
	}
	node := &Node{Config: cfg, IP: ip}
	c.Nodes = append(c.Nodes, node)
	c.start(node, c.opts)
	return node
}

// Options tune a test cluster.
type Options struct {
	// Modify may change each node's config before it starts.
	Modify func(i int, c *cluster.Config)
	// Heartbeat of the HTTP event stream (zero: 200ms).
	Heartbeat time.Duration
	// Token required by the HTTP API for writes (empty: none).
	Token string
	// ACL of every node's HTTP API.
	ACL httpapi.ACLConfig
	// StreamWriteTimeout of the HTTP event stream (zero: the API's default).
	StreamWriteTimeout time.Duration
	// GossipKey encrypts gossip with this key (base64; empty: plaintext);
	// the HTTP API serves each node's keyring.
	GossipKey string
	// NoLeaderWait returns from New without waiting for a leader (for
	// tests of bootstrap itself).
	NoLeaderWait bool
}

var clusterSeq atomic.Uint32

// subnet returns "127.X.Y." unique to this process and cluster.
func subnet() string {
	n := clusterSeq.Add(1)
	pid := os.Getpid()
	return fmt.Sprintf("127.%d.%d.", 10+pid%200, (pid/200+int(n)*7)%250+1)
}

// New starts n nodes bootstrapping as one cluster and waits for a leader.
func New(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	base := subnet()
	c.base = base
	// Cleanups run last-registered first: the data dirs must be made
	// before Shutdown is registered, so that they are removed after the
	// nodes have stopped writing to them (a snapshot being installed
	// while the dir was removed failed a test on a busy machine).
	root := t.TempDir()
	c.root = root
	c.log = testlog.NewWriter(t) // before Shutdown, to keep its messages
	t.Cleanup(c.Shutdown)
	c.opts = opts
	c.expect = n
	for i := 0; i < n; i++ {
		c.addServer()
	}
	if !opts.NoLeaderWait {
		c.WaitForLeader()
	}
	return c
}

// start opens the node's HTTP listener (keeping its port across restarts)
// and starts the server on its data dir.
func (c *Cluster) start(n *Node, opts Options) {
	c.t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(n.IP, strconv.Itoa(n.httpPort)))
	if err != nil {
		c.t.Fatalf("listen http for %s: %v", n.Config.NodeID, err)
	}
	n.httpPort = ln.Addr().(*net.TCPAddr).Port
	n.HTTPURL = "http://" + ln.Addr().String()
	n.Config.HTTPAddr = ln.Addr().String()
	srv, err := cluster.New(n.Config)
	if err != nil {
		ln.Close()
		c.t.Fatalf("start %s: %v", n.Config.NodeID, err)
	}
	// Restarts keep the ports the first start was given.
	_, sp, _ := net.SplitHostPort(srv.RaftAddr())
	_, gp, _ := net.SplitHostPort(srv.GossipAddr())
	n.Config.ServerPort, _ = strconv.Atoi(sp)
	n.Config.GossipPort, _ = strconv.Atoi(gp)
	hb := opts.Heartbeat
	if hb == 0 {
		hb = 200 * time.Millisecond
	}
	n.Server = srv
	hc := httpapi.Config{Backend: srv.Backend(), Heartbeat: hb, Token: opts.Token, ACL: opts.ACL, StreamWriteTimeout: opts.StreamWriteTimeout, UI: ui.Handler(),
		Tracer: n.Config.Tracer}
	if kr := srv.GossipKeyring(); kr != nil {
		hc.Keyring = kr
	}
	n.HTTP = httpapi.New(hc)
	n.opts = opts
	n.ln = ln
	n.running = true
	n.serveWG.Add(1)
	go func() {
		defer n.serveWG.Done()
		n.HTTP.Serve(ln)
	}()
}

// Kill stops node i abruptly (no leave): the others see a failure.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	if !n.running {
		return
	}
	n.running = false
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.HTTP.Shutdown(ctx)
	// What Shutdown left (a connection accepted as it began, which it
	// waits 5 s for before it counts as idle) is cut: its goroutine
	// would outlive the test.
	n.HTTP.Close()
	n.serveWG.Wait()
	if err := n.Server.Shutdown(); err != nil {
		c.t.Logf("shutdown %s: %v", n.Config.NodeID, err)
	}
}

// Restart starts a killed node again on its data dir, address and ports.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Kill(i)
	n := c.Nodes[i]
	cfg := *n.Config
	cfg.Join = nil // must rejoin from what its data dir remembers
	n.Config = &cfg
	c.start(n, n.opts)
}

// MoveAll stops every server at once and starts each again on its data
// dir at new ports, as Kubernetes does when it reschedules every server
// pod (each comes back with a new IP): no server is where the Raft
// configuration or the saved gossip peers last put it. Each joins the
// first one's new gossip address, as a headless service's DNS name would
// give it.
func (c *Cluster) MoveAll() {
	c.t.Helper()
	for i := range c.Nodes {
		c.Kill(i)
	}
	for i, n := range c.Nodes {
		cfg := *n.Config
		cfg.ServerPort, cfg.GossipPort = 0, 0
		cfg.Join = nil
		if i > 0 {
			cfg.Join = []string{c.Nodes[0].GossipAddr()}
		}
		n.Config = &cfg
		c.start(n, n.opts)
	}
}

// Running returns the nodes that are up.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.running {
			out = append(out, n)
		}
	}
	return out
}

// Shutdown stops every node, client agents first. Idempotent.
func (c *Cluster) Shutdown() {
	for _, cl := range c.Clients {
		cl.Kill()
	}
	for i := range c.Nodes {
		c.Kill(i)
	}
}

// Eventually polls cond until it holds or the deadline passes.
func (c *Cluster) Eventually(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitForLeader waits until the running nodes agree on a leader that has
// established its term, and returns it. A node cut off by Partition never
// agrees: take the leader before partitioning.
func (c *Cluster) WaitForLeader() *Node {
	c.t.Helper()
	var leader *Node
	c.Eventually(30*time.Second, "a leader", func() bool {
		leader = nil
		running := c.Running()
		for _, n := range running {
			if n.IsLeader() {
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range running {
			if n.Leader() != leader.RaftAddr() {
				return false
			}
		}
		_, err := leader.ReadIndex(context.Background())
		return err == nil
	})
	return leader
}

// Leader returns the current leader, waiting for one.
func (c *Cluster) Leader() *Node { return c.WaitForLeader() }

// Followers returns the running nodes that are not the leader.
func (c *Cluster) Followers() []*Node {
	l := c.Leader()
	var out []*Node
	for _, n := range c.Running() {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}
