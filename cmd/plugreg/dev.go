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
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/internal/buildinfo"
	"github.com/plugreg/plugreg/tracing"
	"github.com/plugreg/plugreg/tracing/otlp"
)

func runDev(args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: plugreg dev [flags]\n\nRuns a three-server cluster (and, with -clients N, N client agents) on\n127.0.0.1 in temporary data dirs, until Ctrl-C. Agent i (servers 0, 1, 2,\nthen the clients) uses HTTP port http-port+10i and gossip port\nserver-port+10i+1; server i uses server port server-port+10i. Every agent\nwatches a plugins dir of its own (kubelet plugin registration sockets) and\nlistens on a plugin socket of its own (the SDK, package stub).\n\n")
		fs.PrintDefaults()
	}
	httpPort := fs.Int("http-port", 8500, "HTTP port of the first node")
	basePort := fs.Int("server-port", 8300, "server port of the first node; its gossip port is one more")
	logLevel := fs.String("log-level", "error", "trace, debug, info, warn or error")
	clients := fs.Int("clients", 0, "client agents to run beside the three servers (0 to 20)")
	grace := fs.Duration("plugin-grace", 10*time.Second, "how long a plugin stays registered after its session ended without Stop")
	var trace otlp.Config
	fs.StringVar(&trace.Endpoint, "trace-endpoint", "", "send every agent's OpenTelemetry spans to this OTLP/HTTP collector (as the agent's -trace-endpoint)")
	fs.Float64Var(&trace.SampleRate, "trace-sample-rate", 1, "with -trace-endpoint, the share of requests without a caller's sampled traceparent that are traced (dev traces everything by default)")
	secure := fs.Bool("secure", false, "run with mutual TLS everywhere (a fresh CA in the data dir), ACLs on with default deny (bootstrapped; the operator token is printed) and gossip encryption")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *clients < 0 || *clients > 20 {
		return fmt.Errorf("-clients %d: want 0 to 20", *clients)
	}
	if err := trace.Validate(); err != nil {
		return fmt.Errorf("-trace-endpoint or -trace-sample-rate: %w", err)
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
	var addrs, pluginDirs []string
	// add starts one agent with a plugins dir of its own (made first:
	// discovery refuses a dir that does not exist).
	add := func(id string, start func() (*node, error)) error {
		pd := filepath.Join(dir, id, "plugins")
		if err := os.MkdirAll(pd, 0o755); err != nil {
			return err
		}
		n, err := start()
		if err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		nodes = append(nodes, n)
		hs := hostServices{pluginsDir: pd, pluginSocket: filepath.Join(dir, id, "plugin.sock"), pluginGrace: *grace}
		if err := n.startServices(hs, logger.Named(id)); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		addrs = append(addrs, n.ln.Addr().String())
		pluginDirs = append(pluginDirs, pd)
		return nil
	}
	httpAddr := func(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(*httpPort+10*i)) }
	firstGossip := []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(*basePort+1))}
	var sec *devSecurity
	ao := apiOptions{}
	if *secure {
		if sec, err = newDevSecurity(filepath.Join(dir, "tls")); err != nil {
			return err
		}
		ao.acl = httpapi.ACLConfig{Enabled: true, DefaultDeny: true}
	}
	start := time.Now()
	for i := 0; i < 3+*clients; i++ {
		var err error
		if i == 3 {
			if err := waitLeader(nodes, 30*time.Second); err != nil {
				stopAll()
				return err
			}
			if sec != nil {
				if err := sec.bootstrap(nodes[0]); err != nil {
					stopAll()
					return err
				}
			}
		}
		// Each agent as `plugreg agent` runs it from these flags: the
		// dev cluster is the agent's settings, not a copy of them.
		id := fmt.Sprintf("dev%d", i+1)
		if i >= 3 {
			id = fmt.Sprintf("host%d", i-2)
		}
		args := []string{"-node", id, "-data-dir", filepath.Join(dir, id), "-bind", "127.0.0.1",
			"-gossip-port", strconv.Itoa(*basePort + 10*i + 1), "-join", firstGossip[0]}
		if i < 3 {
			args = append(args, "-server-port", strconv.Itoa(*basePort+10*i), "-bootstrap-expect", "3",
				"-node-reap-after", "30s")
		} else {
			args = append(args, "-client", "-retry-join")
		}
		st, err := devAgentSettings(args)
		if err != nil {
			stopAll()
			return err
		}
		a := &agentSetup{logger: logger.Named(id), api: ao}
		var enc gossip.Encryption // each agent's own keyring, in its data dir
		if sec != nil {
			if enc, err = sec.gossipEncryption(st.dataDir); err != nil {
				stopAll()
				return err
			}
			a.api.keyring = enc.Keyring
		}
		role := api.RoleServer
		if st.client {
			role = api.RoleClient
		}
		if a.api.tracer, err = devTracer(trace, id, role); err != nil {
			stopAll()
			return err
		}
		if i < 3 {
			if sec != nil {
				a.tlsc = sec.server
			}
			cfg := st.serverConfig(a, enc)
			cfg.Tracer = a.api.tracer
			// A dev cluster on one machine: gossip's LAN timings
			// shortened, and the leader reconciling it twice a second.
			cfg.GossipFast = true
			cfg.ReconcileInterval = 500 * time.Millisecond
			if i == 0 {
				cfg.Join = nil
			}
			err = add(id, func() (*node, error) { return startNode(cfg, httpAddr(i), a.api, a.tlsc, nil) })
		} else {
			if sec != nil {
				a.tlsc = sec.client
				if st.aclAgentToken, err = sec.agentToken(nodes[0], id); err != nil {
					stopAll()
					return err
				}
			}
			cfg := st.clientConfig(a, enc)
			cfg.Tracer = a.api.tracer
			cfg.GossipFast = true
			err = add(id, func() (*node, error) { return startClientNode(cfg, httpAddr(i), a.api, a.tlsc, nil) })
		}
		if err != nil {
			stopAll()
			return err
		}
	}
	if err := waitLeader(nodes, 30*time.Second); err != nil {
		stopAll()
		return err
	}
	if sec != nil && sec.operatorToken == "" {
		if err := sec.bootstrap(nodes[0]); err != nil {
			stopAll()
			return err
		}
	}
	fmt.Printf("plugreg dev cluster ready in %v (data in %s)\n\n", time.Since(start).Round(time.Millisecond), dir)
	for i, n := range nodes {
		server := "server=-"
		if n.srv != nil {
			server = "server=" + n.srv.RaftAddr()
		}
		fmt.Printf("  %-6s %-6s http=%s  %s  gossip=%s\n         plugins-dir=%s\n         plugin-socket=%s\n", n.nodeID(), n.be.Role(), addrs[i], server, n.gossipAddr(), pluginDirs[i], n.pluginSocket())
	}
	if sec != nil {
		fmt.Printf("\nSecure: mutual TLS on every port, gossip encrypted (keyring in each data dir), ACLs on (default deny). In another terminal:\n\n"+
			"  export PLUGREG_ADDR=https://%s,https://%s,https://%s\n  export PLUGREG_CACERT=%s\n"+
			"  export PLUGREG_CLIENT_CERT=%s\n  export PLUGREG_CLIENT_KEY=%s\n  export PLUGREG_TOKEN=%s   # the operator token\n"+
			"  plugreg members\n  plugreg acl token create -policy write:csi-* -description csi-driver\n  plugreg keyring -list\n",
			addrs[0], addrs[1], addrs[2], sec.caFile, sec.cliCert, sec.cliKey, sec.operatorToken)
		fmt.Printf("\nCtrl-C stops the cluster and removes its data.\n")
	} else {
		fmt.Printf("\nTry, in another terminal:\n\n  export PLUGREG_ADDR=%s,%s,%s\n  plugreg members\n  plugreg operator raft list-peers\n\nThe web UI: http://%s/ui/\n\nA plugin built on the SDK (package stub) registers through a node's socket:\n\n  PLUGREG_PLUGIN_SOCKET=%s go run ./examples/stub-plugin -type demo\n\nCtrl-C stops the cluster and removes its data.\n", addrs[0], addrs[1], addrs[2], addrs[0], nodes[0].pluginSocket())
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	<-sig
	fmt.Println("\nstopping the dev cluster")
	return stopAll()
}

// devAgentSettings are a dev agent's settings, parsed from args as the
// agent's own flags, with nothing from the environment: the dev cluster
// runs on its own.
func devAgentSettings(args []string) (*agentSettings, error) {
	s := &agentSettings{}
	s.flags = s.flagSet()
	if err := s.flags.Parse(args); err != nil {
		return nil, fmt.Errorf("dev agent flags %v: %w", args, err)
	}
	return s, nil
}

// waitLeader waits until the three servers know a leader.
func waitLeader(nodes []*node, within time.Duration) error {
	deadline := time.Now().Add(within)
	for nodes[0].srv.Leader() == "" || nodes[1].srv.Leader() == "" || nodes[2].srv.Leader() == "" {
		if time.Now().After(deadline) {
			return fmt.Errorf("no leader within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// devTracer is a dev agent's tracer: nil (off) without -trace-endpoint
// (the environment's OTEL_* endpoints are not read by dev, which runs on
// its own), else one exporter per agent, naming it.
func devTracer(cfg otlp.Config, node, role string) (*tracing.Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	cfg.Node, cfg.Role, cfg.Version = node, role, buildinfo.Read().Version
	return otlp.Setup(cfg)
}
