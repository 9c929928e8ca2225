package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
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
	d := &devCluster{}
	fs.IntVar(&d.httpPort, "http-port", 7700, "HTTP port of the first node")
	fs.IntVar(&d.basePort, "server-port", 7300, "server port of the first node; its gossip port is one more")
	logLevel := fs.String("log-level", "error", "trace, debug, info, warn or error")
	clients := fs.Int("clients", 0, "client agents to run beside the three servers (0 to 20)")
	fs.DurationVar(&d.grace, "plugin-grace", 10*time.Second, "how long a plugin stays registered after its session ended without Stop")
	fs.StringVar(&d.trace.Endpoint, "trace-endpoint", "", "send every agent's OpenTelemetry spans to this OTLP/HTTP collector (as the agent's -trace-endpoint)")
	fs.Float64Var(&d.trace.SampleRate, "trace-sample-rate", 1, "with -trace-endpoint, the share of requests without a caller's sampled traceparent that are traced (dev traces everything by default)")
	secure := fs.Bool("secure", false, "run with mutual TLS everywhere (a fresh CA in the data dir), ACLs on with default deny (bootstrapped; the operator token is printed) and gossip encryption")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs, "unexpected arguments %v (flags start with -)", fs.Args())
	}
	if *clients < 0 || *clients > 20 {
		return fmt.Errorf("-clients %d: want 0 to 20", *clients)
	}
	if err := d.trace.Validate(); err != nil {
		return fmt.Errorf("-trace-endpoint or -trace-sample-rate: %w", err)
	}
	d.logger = hclog.New(&hclog.LoggerOptions{Name: "plugreg-dev", Level: hclog.LevelFromString(*logLevel)})
	var err error
	if d.dir, err = os.MkdirTemp("", "plugreg-dev-"); err != nil {
		return err
	}
	defer os.RemoveAll(d.dir)
	if *secure {
		if d.sec, err = newDevSecurity(filepath.Join(d.dir, "tls")); err != nil {
			return err
		}
		d.api.acl = httpapi.ACLConfig{Enabled: true, DefaultDeny: true}
	}
	start := time.Now()
	if err := d.start(3 + *clients); err != nil {
		d.stop()
		return err
	}
	fmt.Printf("plugreg dev cluster ready in %v (data in %s)\n\n", time.Since(start).Round(time.Millisecond), d.dir)
	for i, n := range d.nodes {
		server := "server=-"
		if n.srv != nil {
			server = "server=" + n.srv.RaftAddr()
		}
		fmt.Printf("  %-6s %-6s http=%s  %s  gossip=%s\n         plugins-dir=%s\n         plugin-socket=%s\n", n.nodeID(), n.be.Role(), d.addrs[i], server, n.gossipAddr(), d.pluginDirs[i], n.pluginSocket())
	}
	self := selfCommand()
	if d.sec != nil {
		fmt.Printf("\nSecure: mutual TLS on every port, gossip encrypted (keyring in each data dir), ACLs on (default deny). In another terminal:\n\n"+
			"  export PLUGREG_ADDR=https://%s,https://%s,https://%s\n  export PLUGREG_CACERT=%s\n"+
			"  export PLUGREG_CLIENT_CERT=%s\n  export PLUGREG_CLIENT_KEY=%s\n  export PLUGREG_TOKEN=%s   # the operator token\n"+
			"  %[8]s members\n  %[8]s acl token create -policy 'write:csi-*' -description csi-driver\n  %[8]s keyring -list\n",
			d.addrs[0], d.addrs[1], d.addrs[2], d.sec.caFile, d.sec.cliCert, d.sec.cliKey, d.sec.operatorToken, self)
		fmt.Printf("\nCtrl-C stops the cluster and removes its data.\n")
	} else {
		fmt.Printf("\nTry, in another terminal:\n\n  export PLUGREG_ADDR=%s,%s,%s\n  %[6]s members\n  %[6]s operator raft list-peers\n\nThe web UI: http://%[4]s/ui/\n\nA plugin built on the SDK (package stub) registers through a node's socket (from the repository's root):\n\n  PLUGREG_PLUGIN_SOCKET=%[5]s go run ./examples/stub-plugin -type demo\n\nCtrl-C stops the cluster and removes its data.\n", d.addrs[0], d.addrs[1], d.addrs[2], d.addrs[0], d.nodes[0].pluginSocket(), self)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	<-sig
	fmt.Println("\nstopping the dev cluster")
	// Every server loses its peers at once: their complaints about it
	// (closed connections, failed heartbeats) are the stop itself, not
	// news. An error of the stop is still returned and printed.
	d.logger.SetLevel(hclog.Off)
	return d.stop()
}

// selfCommand is how the user runs this binary, for the commands dev
// suggests to work as printed: "plugreg" when it is the one on the PATH,
// "go run ./cmd/plugreg" under go run (the binary is in go's temporary
// build dir), else the path it was started by ("./plugreg").
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "plugreg"
	}
	if onPath, err := exec.LookPath("plugreg"); err == nil {
		if a, err1 := os.Stat(onPath); err1 == nil {
			if b, err2 := os.Stat(exe); err2 == nil && os.SameFile(a, b) {
				return "plugreg"
			}
		}
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/plugreg"
	}
	if strings.ContainsRune(os.Args[0], filepath.Separator) {
		return os.Args[0]
	}
	return exe
}

// devCluster is what dev runs: its agents, in the order they started.
type devCluster struct {
	dir                string // every agent's data dir, and the CA's
	httpPort, basePort int
	grace              time.Duration
	trace              otlp.Config
	logger             hclog.Logger
	sec                *devSecurity // nil without -secure
	api                apiOptions   // what every agent's API starts from

	nodes             []*node
	addrs, pluginDirs []string // each agent's HTTP address and plugins dir
}

// start starts n agents: the three servers, then (once they have a
// leader, and with -secure its operator token) the client agents.
func (d *devCluster) start(n int) error {
	for i := 0; i < n; i++ {
		if i == 3 {
			if err := d.ready(); err != nil {
				return err
			}
		}
		if err := d.startAgent(i); err != nil {
			return namePortInUse(err, "127.0.0.1", []portFlag{{"-http-port", d.httpPort + 10*i}, {"-server-port", d.basePort + 10*i}, {"-server-port", d.basePort + 10*i + 1}})
		}
	}
	return d.ready()
}

// ready waits for a leader and, with -secure, bootstraps the ACLs once.
func (d *devCluster) ready() error {
	if err := waitLeader(d.nodes, 30*time.Second); err != nil {
		return err
	}
	if d.sec != nil && d.sec.operatorToken == "" {
		return d.sec.bootstrap(d.nodes[0])
	}
	return nil
}

// startAgent starts agent i (servers 0 to 2, then client agents) as
// `plugreg agent` runs it from these flags: the dev cluster is the
// agent's settings, not a copy of them.
func (d *devCluster) startAgent(i int) error {
	id := fmt.Sprintf("dev%d", i+1)
	if i >= 3 {
		id = fmt.Sprintf("host%d", i-2)
	}
	args := []string{"-node", id, "-data-dir", filepath.Join(d.dir, id), "-bind", "127.0.0.1",
		"-gossip-port", strconv.Itoa(d.basePort + 10*i + 1), "-join", net.JoinHostPort("127.0.0.1", strconv.Itoa(d.basePort+1))}
	if i < 3 {
		args = append(args, "-server-port", strconv.Itoa(d.basePort+10*i), "-bootstrap-expect", "3", "-node-reap-after", "30s")
	} else {
		args = append(args, "-client", "-retry-join")
	}
	st, err := devAgentSettings(args)
	if err != nil {
		return err
	}
	a := &agentSetup{logger: d.logger.Named(id), api: d.api}
	var enc gossip.Encryption // each agent's own keyring, in its data dir
	if d.sec != nil {
		if enc, err = d.sec.gossipEncryption(st.dataDir); err != nil {
			return err
		}
		a.api.keyring = enc.Keyring
	}
	role := api.RoleServer
	if st.client {
		role = api.RoleClient
	}
	if a.api.tracer, err = devTracer(d.trace, id, role); err != nil {
		return err
	}
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.httpPort+10*i))
	if !st.client {
		if d.sec != nil {
			a.tlsc = d.sec.server
		}
		cfg := st.serverConfig(a, enc)
		cfg.Tracer = a.api.tracer
		// A dev cluster on one machine: gossip's LAN timings shortened,
		// and the leader reconciling it twice a second.
		cfg.GossipFast = true
		cfg.ReconcileInterval = 500 * time.Millisecond
		if i == 0 {
			cfg.Join = nil
		}
		return d.add(id, func() (*node, error) { return startNode(cfg, httpAddr, a.api, a.tlsc, nil) })
	}
	if d.sec != nil {
		a.tlsc = d.sec.client
		if st.aclAgentToken, err = d.sec.agentToken(d.nodes[0], id); err != nil {
			return err
		}
	}
	cfg := st.clientConfig(a, enc)
	cfg.Tracer = a.api.tracer
	cfg.GossipFast = true
	return d.add(id, func() (*node, error) { return startClientNode(cfg, httpAddr, a.api, a.tlsc, nil) })
}

// add starts one agent with a plugins dir of its own (made first:
// discovery refuses a dir that does not exist) and its host services.
func (d *devCluster) add(id string, start func() (*node, error)) error {
	pd := filepath.Join(d.dir, id, "plugins")
	if err := os.MkdirAll(pd, 0o755); err != nil {
		return err
	}
	n, err := start()
	if err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	d.nodes = append(d.nodes, n)
	hs := hostServices{pluginsDir: pd, pluginSocket: filepath.Join(d.dir, id, "plugin.sock"), pluginGrace: d.grace}
	if err := n.startServices(hs, d.logger.Named(id)); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	d.addrs = append(d.addrs, n.ln.Addr().String())
	d.pluginDirs = append(d.pluginDirs, pd)
	return nil
}

// stop stops every agent, the last started first.
func (d *devCluster) stop() error {
	var errs []error
	for i := len(d.nodes) - 1; i >= 0; i-- {
		errs = append(errs, d.nodes[i].stop(false))
	}
	return errors.Join(errs...)
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
