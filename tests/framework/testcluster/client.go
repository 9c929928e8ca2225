package testcluster

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/ui"
)

// ClientNode is an in-process client agent with its HTTP API.
type ClientNode struct {
	*agent.Client
	Config   agent.Config
	IP       string
	HTTP     *httpapi.Server
	HTTPURL  string
	c        *Cluster
	ln       net.Listener
	serveWG  sync.WaitGroup
	httpPort int
	running  bool
}

// AddClient starts a client agent on its own loopback address, joined to
// the servers' gossip, serving the HTTP API. modify may change its config.
func (c *Cluster) AddClient(modify func(*agent.Config)) *ClientNode {
	c.t.Helper()
	k := len(c.Clients) + 1
	cfg := agent.Config{
		NodeID:        fmt.Sprintf("client%d", k),
		DataDir:       filepath.Join(c.root, fmt.Sprintf("client%d", k)),
		BindAddr:      c.base + strconv.Itoa(100+k),
		RetryJoin:     true,
		RetryInterval: 100 * time.Millisecond,
		GossipFast:    true,
		Logger:        c.log.Logger("agent", hclog.Warn),
	}
	for _, n := range c.Running() {
		cfg.Join = append(cfg.Join, n.GossipAddr())
	}
	if modify != nil {
		modify(&cfg)
	}
	cn := &ClientNode{Config: cfg, IP: cfg.BindAddr, c: c}
	c.Clients = append(c.Clients, cn)
	cn.start()
	return cn
}

func (cn *ClientNode) start() {
	t := cn.c.t
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(cn.IP, strconv.Itoa(cn.httpPort)))
	if err != nil {
		t.Fatalf("listen http for %s: %v", cn.Config.NodeID, err)
	}
	cn.httpPort = ln.Addr().(*net.TCPAddr).Port
	cn.HTTPURL = "http://" + ln.Addr().String()
	cn.Config.HTTPAddr = ln.Addr().String()
	cl, err := agent.New(cn.Config)
	if err != nil {
		ln.Close()
		t.Fatalf("start %s: %v", cn.Config.NodeID, err)
	}
	// Restarts keep the gossip port the first start was given.
	_, gp, _ := net.SplitHostPort(cl.GossipAddr())
	cn.Config.GossipPort, _ = strconv.Atoi(gp)
	cn.Client = cl
	cn.HTTP = httpapi.New(httpapi.Config{Backend: cl, Heartbeat: 200 * time.Millisecond, ACL: cn.c.opts.ACL, UI: ui.Handler(), Tracer: cn.Config.Tracer})
	cn.ln = ln
	cn.running = true
	cn.serveWG.Add(1)
	go func() {
		defer cn.serveWG.Done()
		cn.HTTP.Serve(ln)
	}()
}

// Kill stops the agent abruptly (no leave): gossip sees a failure.
func (cn *ClientNode) Kill() {
	if !cn.running {
		return
	}
	cn.running = false
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cn.HTTP.Shutdown(ctx)
	// What Shutdown left (a connection accepted as it began, which it
	// waits 5 s for before it counts as idle) is cut: its goroutine
	// would outlive the test.
	cn.HTTP.Close()
	cn.serveWG.Wait()
	cn.Client.Shutdown()
}

// Restart starts a killed agent again on its data dir, address and ports,
// rejoining from what its data dir remembers.
func (cn *ClientNode) Restart() {
	cn.c.t.Helper()
	cn.Kill()
	cn.Config.Join = nil
	cn.start()
}
