package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/httpapi"
)

// exampleAgent is a one-server plugreg cluster on loopback for the
// examples (the tests use testcluster, which needs a *testing.T): what
// `plugreg agent -server -bootstrap-expect 1` runs.
type exampleAgent struct {
	addr string
	dir  string
	srv  *cluster.Server
	http *httpapi.Server
}

func startAgent() *exampleAgent {
	dir, err := os.MkdirTemp("", "plugreg-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.BindAddr = "example", filepath.Join(dir, "data"), "127.0.0.1"
	cfg.ServerPort, cfg.GossipPort, cfg.BootstrapExpect = 0, 0, 1
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	cfg.HTTPAddr = ln.Addr().String()
	srv, err := cluster.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	a := &exampleAgent{addr: ln.Addr().String(), dir: dir, srv: srv, http: httpapi.New(httpapi.Config{Backend: srv.Backend()})}
	go a.http.Serve(ln)
	for deadline := time.Now().Add(30 * time.Second); !srv.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatal("no leader")
		}
	}
	return a
}

func (a *exampleAgent) stop() {
	// Close, not Shutdown: a stream's connection, or one the client
	// opened as the example ended, would keep Shutdown waiting, and its
	// goroutine would outlive the example (the package's leak check).
	a.http.Close()
	a.srv.Shutdown()
	os.RemoveAll(a.dir)
}

// A client registers a plugin instance and lists its type.
func Example() {
	agent := startAgent() // a one-server cluster on loopback
	defer agent.stop()

	c, err := client.New(client.Config{Addrs: []string{agent.addr}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Register(ctx, &api.PluginInfo{Type: "csi-node", Name: "ebs", AllocID: "a1", NodeID: "host-1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Result)
	plugins, _, err := c.List(ctx, "csi-node", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range plugins {
		fmt.Println(p.Name, p.AllocID, p.NodeID, p.ConnectionInfo.SocketPath)
	}
	// Output:
	// registered
	// ebs a1 host-1 /run/ebs.sock
}

// DefaultConfig reads PLUGREG_ADDR, PLUGREG_TOKEN (or PLUGREG_TOKEN_FILE)
// and the TLS variables, as the CLI does; a program sets what it must
// over them.
func ExampleDefaultConfig() {
	cfg, err := client.DefaultConfig()
	if err != nil {
		log.Fatal(err) // PLUGREG_TOKEN_FILE could not be read
	}
	cfg.RetryWait = 50 * time.Millisecond
	c, err := client.New(cfg)
	if err != nil {
		log.Fatal(err) // a TLS file could not be loaded
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	types, _, err := c.Types(ctx, nil)
	if err != nil {
		log.Fatal(err) // "no plugreg agent at 127.0.0.1:7700: connection refused"
	}
	fmt.Println(types)
}

// ConfigFromEnv reads an environment other than the process's.
func ExampleConfigFromEnv() {
	env := map[string]string{"PLUGREG_ADDR": "10.0.0.1:7700, 10.0.0.2:7700"}
	cfg, err := client.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.Addrs)
	// Output: [10.0.0.1:7700 10.0.0.2:7700]
}

// List reads the newest instance of every name of a type; its meta's
// Index is where a Stream of the changes after it starts.
func ExampleClient_List() {
	agent := startAgent()
	defer agent.stop()
	c, err := client.New(client.Config{Addrs: []string{agent.addr}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, alloc := range []string{"a1", "a2"} { // a2 replaces a1 as ebs's newest
		_, err := c.Register(ctx, &api.PluginInfo{Type: "csi-node", Name: "ebs", AllocID: alloc, ConnectionInfo: &api.ConnectionInfo{Address: "10.0.0.7:9000"}})
		if err != nil {
			log.Fatal(err)
		}
	}
	plugins, meta, err := c.List(ctx, "csi-node", &client.QueryOptions{Filter: `Name == "ebs"`})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(plugins), plugins[0].AllocID, meta.Index > 0, meta.KnownLeader)
	// Output: 1 a2 true true
}

// Stream delivers the changes after an index until its context ends;
// then Err says why it ended (nil: the context was canceled).
func ExampleClient_Stream() {
	agent := startAgent()
	defer agent.stop()
	c, err := client.New(client.Config{Addrs: []string{agent.addr}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, meta, err := c.List(ctx, "csi-node", nil)
	if err != nil {
		log.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	s := c.Stream(sctx, meta.Index, client.WatchOptions{Types: []string{"csi-node"}})
	info := &api.PluginInfo{Type: "csi-node", Name: "ebs", AllocID: "a1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}
	if _, err := c.Register(ctx, info); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Deregister(ctx, "csi-node", "ebs", "a1"); err != nil {
		log.Fatal(err)
	}
	for ev := range s.Events() {
		fmt.Println(ev.EventType, ev.Info.Name)
		if ev.EventType == api.EventDeregistered {
			stop()
		}
	}
	if err := s.Err(); err != nil {
		log.Fatal(err) // a refused token or filter, no agent at the addresses, ...
	}
	fmt.Println("stopped")
	// Output:
	// registered ebs
	// deregistered ebs
	// stopped
}
