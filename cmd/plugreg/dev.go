package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/cluster"
)

func runDev(args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: plugreg dev [flags]\n\nRuns a three-node cluster on 127.0.0.1 in temporary data dirs, until Ctrl-C.\nNode i (0, 1, 2) uses HTTP port http-port+10i, server port 8300+10i and\ngossip port 8301+10i.\n\n")
		fs.PrintDefaults()
	}
	httpPort := fs.Int("http-port", 8500, "HTTP port of the first node")
	basePort := fs.Int("server-port", 8300, "server port of the first node; its gossip port is one more")
	logLevel := fs.String("log-level", "error", "trace, debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "plugreg-dev", Level: hclog.LevelFromString(*logLevel)})
	dir, err := os.MkdirTemp("", "plugreg-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var nodes []*node
	stopAll := func() error {
		var errs []error
		for i := len(nodes) - 1; i >= 0; i-- {
			errs = append(errs, nodes[i].stop(false))
		}
		return errors.Join(errs...)
	}
	var addrs []string
	for i := 0; i < 3; i++ {
		cfg := cluster.DefaultConfig()
		cfg.NodeID = fmt.Sprintf("dev%d", i+1)
		cfg.DataDir = filepath.Join(dir, cfg.NodeID)
		cfg.BindAddr = "127.0.0.1"
		cfg.ServerPort = *basePort + 10*i
		cfg.GossipPort = *basePort + 10*i + 1
		cfg.BootstrapExpect = 3
		if i > 0 {
			cfg.Join = []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(*basePort+1))}
		}
		cfg.GossipFast = true
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
		cfg.ReconcileInterval = 500 * time.Millisecond
		cfg.NodeReapAfter = 30 * time.Second
		cfg.Logger = logger.Named(cfg.NodeID)
		n, err := startNode(cfg, net.JoinHostPort("127.0.0.1", strconv.Itoa(*httpPort+10*i)), "", nil)
		if err != nil {
			stopAll()
			return fmt.Errorf("start %s: %w", cfg.NodeID, err)
		}
		nodes = append(nodes, n)
		addrs = append(addrs, n.ln.Addr().String())
	}
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for nodes[0].srv.Leader() == "" || nodes[1].srv.Leader() == "" || nodes[2].srv.Leader() == "" {
		if time.Now().After(deadline) {
			stopAll()
			return errors.New("no leader within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("plugreg dev cluster ready in %v (data in %s)\n\n", time.Since(start).Round(time.Millisecond), dir)
	for i, n := range nodes {
		fmt.Printf("  %s  http=%s  server=%s  gossip=%s\n", n.srv.NodeID(), addrs[i], n.srv.RaftAddr(), n.srv.GossipAddr())
	}
	fmt.Printf("\nTry, in another terminal:\n\n  export PLUGREG_ADDR=%s,%s,%s\n  plugreg members\n\nCtrl-C stops the cluster and removes its data.\n", addrs[0], addrs[1], addrs[2])

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	<-sig
	fmt.Println("\nstopping the dev cluster")
	return stopAll()
}
