package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tlsutil"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	fs        *flag.FlagSet
	argsUsage string   // the positional arguments, as the usage line names them
	args      []string // positional arguments, wherever they stood
	dashArgs  []string // the arguments after "--" (watch's handler)
	addr      *string
	token     *string
	tokenFile *string
	timeout   *time.Duration
	tls       tlsutil.ClientOptions
	out       output
	cfg       *client.Config // config's, once made
}

func newClientFlags(name, argsUsage, help string) *clientFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cf := &clientFlags{fs: fs, argsUsage: argsUsage}
	// The defaults shown are the environment's (client.ConfigFromEnv
	// reads it for the client), but for the token's secret.
	env := os.Getenv
	addr := env(client.EnvAddr)
	if addr == "" {
		addr = client.DefaultAddr
	}
	cf.addr = fs.String("addr", addr, "node HTTP addresses, comma-separated (env "+client.EnvAddr+")")
	cf.token = fs.String("token", "", "ACL token (env "+client.EnvToken+")")
	cf.tokenFile = fs.String("token-file", "", "read the ACL token from this file, as mounted from a Kubernetes Secret (env "+client.EnvTokenFile+"); as Consul's, it wins over -token, and both over the environment")
	fs.StringVar(&cf.tls.CAFile, "ca-file", env(client.EnvCACert), "PEM CA that verifies the servers' HTTPS certificates; with it, addresses without a scheme are https (env "+client.EnvCACert+")")
	fs.StringVar(&cf.tls.CertFile, "client-cert", env(client.EnvClientCert), "PEM client certificate, for agents that -verify-incoming (env "+client.EnvClientCert+")")
	fs.StringVar(&cf.tls.KeyFile, "client-key", env(client.EnvClientKey), "PEM key of -client-cert (env "+client.EnvClientKey+")")
	fs.StringVar(&cf.tls.ServerName, "tls-server-name", env(client.EnvTLSServerName), "name the agent's certificate must carry (empty: the address's host) (env "+client.EnvTLSServerName+")")
	cf.out.define(fs)
	cf.timeout = fs.Duration("timeout", 30*time.Second, "give up after this long")
	fs.Usage = usageOf(fs, argsUsage, help)
	return cf
}

// parseArgs parses flags wherever they stand among the positional
// arguments ("get csi ebs -json" as well as "get -json csi ebs"); what
// follows "--" is kept apart in dashArgs.
func (cf *clientFlags) parseArgs(args []string) error {
	cf.args, cf.dashArgs = nil, nil
	for {
		if err := parseFlags(cf.fs, args); err != nil {
			return err
		}
		rest := cf.fs.Args()
		if len(rest) == 0 {
			return cf.out.check(cf.fs)
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			cf.dashArgs = rest
			return cf.out.check(cf.fs)
		}
		cf.args = append(cf.args, rest[0])
		args = rest[1:]
	}
}

// parse is parseArgs for commands that take one of nargs positional
// arguments (none given: any number), with or after "--".
func (cf *clientFlags) parse(args []string, nargs ...int) error {
	if err := cf.parseArgs(args); err != nil {
		return err
	}
	cf.args, cf.dashArgs = append(cf.args, cf.dashArgs...), nil
	ok := len(nargs) == 0
	for _, n := range nargs {
		ok = ok || len(cf.args) == n
	}
	if !ok {
		if cf.argsUsage == "" {
			return usageErrorf(cf.fs, "takes no arguments, got %q", strings.Join(cf.args, " "))
		}
		return usageErrorf(cf.fs, "want %s, got %d argument(s)", cf.argsUsage, len(cf.args))
	}
	return nil
}

// withClient parses args (expecting one of nargs positional arguments;
// none given: any number), builds the client and the command's context, and
// runs fn.
func (cf *clientFlags) withClient(args []string, nargs []int, fn func(ctx context.Context, c *client.Client) error) error {
	if err := cf.parse(args, nargs...); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := cf.ctx()
	defer cancel()
	return fn(ctx, c)
}

func (cf *clientFlags) client() (*client.Client, error) { return cf.clientAt(*cf.addr) }

// clientAt is a client of addrs (comma-separated) with the command's TLS
// settings and token: for commands that must talk to one particular agent
// (each member in turn, the leader).
func (cf *clientFlags) clientAt(addrs string) (*client.Client, error) {
	base, err := cf.config()
	if err != nil {
		return nil, err
	}
	cfg := *base
	cfg.Addrs = client.SplitAddrs(addrs)
	if cfg.TLS == nil && strings.Contains(addrs, "https://") {
		// https:// without a CA: the system's roots verify the agents.
		if cfg.TLS, err = tlsutil.ClientConfig(cf.tls); err != nil {
			return nil, err
		}
	}
	return client.New(cfg)
}

// config is the command's client configuration but for its addresses,
// made once (keyring and the operator commands make a client per
// member): the environment first, the Go client's own reading of it,
// then the flags over it (-token-file, then -token, as Consul orders
// them), and the TLS files read into a tls.Config.
func (cf *clientFlags) config() (*client.Config, error) {
	if cf.cfg != nil {
		return cf.cfg, nil
	}
	cfg, err := client.DefaultConfig()
	if err != nil {
		return nil, err
	}
	switch {
	case *cf.tokenFile != "":
		if cfg.Token, err = client.ReadTokenFile(*cf.tokenFile); err != nil {
			return nil, fmt.Errorf("-token-file: %w", err)
		}
	case *cf.token != "":
		cfg.Token = *cf.token
	}
	cfg.TLSOptions = cf.tls
	if cf.tls != (tlsutil.ClientOptions{}) {
		if cfg.TLS, err = tlsutil.ClientConfig(cf.tls); err != nil {
			return nil, err
		}
	}
	cf.cfg = &cfg
	return cf.cfg, nil
}

func (cf *clientFlags) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	return ctx, func() { stop(); cancel() }
}

type kvFlag map[string]string

func (m kvFlag) String() string { return "" }
func (m kvFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	m[k] = val
	return nil
}

func runRegister(args []string) error {
	cf := newClientFlags("register", "", "Registers a plugin instance, or updates it when (type, name, alloc) exists.\nGive the fields as flags, or the whole PluginInfo as JSON with -file (- for stdin).")
	var (
		info api.PluginInfo
		conn api.ConnectionInfo
		opts = kvFlag{}
	)
	cf.fs.StringVar(&info.Type, "type", "", "plugin type, e.g. csi-node")
	cf.fs.StringVar(&info.Name, "name", "", "plugin name, e.g. ebs")
	cf.fs.StringVar(&info.AllocID, "alloc", "", "allocation ID")
	cf.fs.StringVar(&info.Version, "version", "", "plugin version")
	cf.fs.StringVar(&info.NodeID, "node", "", "ID of the node the plugin runs on")
	cf.fs.StringVar(&conn.SocketPath, "socket", "", "plugin socket path")
	cf.fs.StringVar(&conn.Address, "address", "", "plugin network address")
	cf.fs.Var(opts, "opt", "an option key=value (repeatable)")
	file := cf.fs.String("file", "", "read the PluginInfo JSON from this file (- for stdin)")
	ttl := cf.fs.Duration("ttl", 0, "lease the registration: it expires unless renewed within this long (1s to 24h; 0: no lease)")
	renew := cf.fs.Bool("renew", false, "with a TTL: stay in the foreground renewing the lease (registering again if it is lost) until Ctrl-C, then deregister")
	if err := cf.parse(args, 0); err != nil {
		return err
	}
	if *file != "" {
		var r io.Reader = os.Stdin
		if *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		dec := json.NewDecoder(r)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&info); err != nil {
			return fmt.Errorf("read %s: %w", *file, err)
		}
	} else {
		if conn != (api.ConnectionInfo{}) {
			info.ConnectionInfo = &conn
		}
		if len(opts) > 0 {
			info.Options = opts
		}
	}
	if *ttl != 0 {
		info.TTL = api.Duration(*ttl)
	}
	if *file == "" {
		// Checked here too, to name the flags, not the fields the API's
		// error names (-file's JSON uses the fields' names).
		if err := api.ValidateNewPlugin(&info); err != nil {
			return &usageError{cmd: cf.fs.Name(), msg: registerFlagNames.Replace(err.Error())}
		}
	}
	if *renew && info.TTL == 0 {
		return usageErrorf(cf.fs, "-renew keeps a lease: give it a -ttl")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := cf.ctx()
	defer cancel()
	res, err := c.Register(ctx, &info)
	if err != nil {
		return err
	}
	if err := cf.out.print(res, writeLine(res, info.Type+"/"+info.Name+"/"+info.AllocID)); err != nil {
		return err
	}
	if !*renew {
		return nil
	}
	cancel() // the hold runs until a signal, not -timeout
	return holdLease(c, &info, res, *cf.timeout)
}

// registerFlagNames rewrites a registration's validation error in the
// register command's terms: the flag for each field.
var registerFlagNames = strings.NewReplacer(
	"ConnectionInfo needs a SocketPath or an Address", "give -socket or -address",
	"ConnectionInfo.SocketPath", "-socket", "ConnectionInfo.Address", "-address",
	"AllocID", "-alloc", "NodeID", "-node", "Type", "-type", "Name", "-name", "Version", "-version", "TTL", "-ttl",
	"plugreg: invalid request: ", "")

func runDeregister(args []string) error {
	cf := newClientFlags("deregister", "TYPE NAME ALLOC | -node NODE", "Deregisters one plugin instance, or with -node every instance of a node.")
	nodeID := cf.fs.String("node", "", "deregister every plugin of this node")
	if err := cf.parseArgs(args); err != nil {
		return err
	}
	if (*nodeID == "") == (len(cf.args) != 3) || (*nodeID != "" && len(cf.args) != 0) {
		return usageErrorf(cf.fs, "want TYPE NAME ALLOC, or -node NODE alone; got %d argument(s)", len(cf.args))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := cf.ctx()
	defer cancel()
	var (
		res  api.WriteResult
		what string
	)
	if *nodeID != "" {
		res, err = c.DeregisterNode(ctx, *nodeID)
		what = "plugins of node " + *nodeID
	} else {
		a := cf.args
		res, err = c.Deregister(ctx, a[0], a[1], a[2])
		what = strings.Join(a, "/")
	}
	if err != nil {
		return err
	}
	return cf.out.print(res, writeLine(res, what))
}

// writeLine is a write's table view: what it did, to what, at which index.
func writeLine(res api.WriteResult, what string) func() table {
	return func() table {
		return table{rows: [][]string{{fmt.Sprintf("%s %s at index %d", res.Result, what, res.Index)}}}
	}
}

func queryFlags(cf *clientFlags) *bool {
	return cf.fs.Bool("stale", false, "read this node's state without asking the leader (may be behind)")
}

// pluginTable is the table view of plugin instances.
func pluginTable(list []*api.PluginInfo) func() table {
	return func() table { return table{header: pluginHeader, rows: pluginRows(list)} }
}

func pluginRows(list []*api.PluginInfo) [][]string {
	var rows [][]string
	for _, p := range list {
		conn := ""
		if p.ConnectionInfo != nil {
			conn = p.ConnectionInfo.SocketPath
			if conn == "" {
				conn = p.ConnectionInfo.Address
			}
		}
		rows = append(rows, []string{p.Name, p.AllocID, p.Version, p.NodeID, healthText(p), conn, fmt.Sprint(p.ModifyIndex)})
	}
	return rows
}

const pluginHeader = "NAME\tALLOC\tVERSION\tNODE\tHEALTH\tCONNECTION\tINDEX"

// healthText is an instance's health in a table: passing, or suspect with
// its checker and the time it was last seen passing (-json has the reason).
func healthText(p *api.PluginInfo) string {
	h := p.Health
	if h == nil {
		return string(api.HealthPassing)
	}
	return fmt.Sprintf("%s (%s, last seen %s)", h.Status, h.Check, h.LastSeen.UTC().Format(time.RFC3339))
}

func runList(args []string) error {
	cf := newClientFlags("list", "TYPE", "Lists the newest instance of every plugin of TYPE, sorted by name.")
	stale := queryFlags(cf)
	flt := cf.fs.String("filter", "", "list only the instances that match this expression (docs/api.md, Filters)")
	return cf.withClient(args, []int{1}, func(ctx context.Context, c *client.Client) error {
		list, meta, err := c.List(ctx, cf.args[0], &client.QueryOptions{Stale: *stale, Filter: *flt})
		if err != nil {
			return err
		}
		if err := cf.out.print(list, pluginTable(list)); err != nil {
			return err
		}
		noun := "plugins"
		if len(list) == 1 {
			noun = "plugin"
		}
		cf.out.summary("(%d %s at index %d)", len(list), noun, meta.Index)
		return nil
	})
}

func runCoverage(args []string) error {
	cf := newClientFlags("coverage", "TYPE", "Shows which live nodes have an instance of TYPE (covered), which lack one\n(missing), which have instances that cannot be trusted (suspect: failed in\ngossip, not reaped yet) and which nodes outside the pool have some\n(orphaned). See docs/api.md, Coverage.")
	stale := queryFlags(cf)
	role := cf.fs.String("role", "", "count only the members of this role: client or server (empty: every member)")
	return cf.withClient(args, []int{1}, func(ctx context.Context, c *client.Client) error {
		if err := api.ValidateCoverageRole(*role); err != nil {
			return err
		}
		cov, meta, err := c.CoverageOfRole(ctx, cf.args[0], *role, &client.QueryOptions{Stale: *stale})
		if err != nil {
			return err
		}
		err = cf.out.print(cov, func() table {
			t := table{header: "NODE\tSTATE"}
			for _, l := range []struct {
				state string
				nodes []string
			}{{"covered", cov.Covered}, {"missing", cov.Missing}, {"suspect", cov.Suspect}, {"orphaned", cov.Orphaned}} {
				for _, n := range l.nodes {
					t.rows = append(t.rows, []string{n, l.state})
				}
			}
			return t
		})
		if err != nil {
			return err
		}
		cf.out.summary("(%s: %d live nodes, %d covered, %d missing, %d suspect, %d orphaned instances, at index %d)\n",
			cov.Type, cov.Nodes, len(cov.Covered), len(cov.Missing), len(cov.Suspect), cov.OrphanedInstances, meta.Index)
		return nil
	})
}

func runGet(args []string) error {
	cf := newClientFlags("get", "TYPE NAME [ALLOC]", "Shows a plugin's instances, newest first, or one instance.")
	stale := queryFlags(cf)
	return cf.withClient(args, []int{2, 3}, func(ctx context.Context, c *client.Client) error {
		q := &client.QueryOptions{Stale: *stale}
		a := cf.args
		if len(a) == 3 {
			p, _, err := c.Get(ctx, a[0], a[1], a[2], q)
			if err != nil {
				return err
			}
			return cf.out.print(p, pluginTable([]*api.PluginInfo{p}))
		}
		list, _, err := c.Instances(ctx, a[0], a[1], q)
		if err != nil {
			return err
		}
		return cf.out.print(list, pluginTable(list))
	})
}

func runTypes(args []string) error {
	cf := newClientFlags("types", "", "Lists the plugin types that have at least one instance.")
	stale := queryFlags(cf)
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		types, _, err := c.Types(ctx, &client.QueryOptions{Stale: *stale})
		if err != nil {
			return err
		}
		return cf.out.print(types, lines(types))
	})
}

func runWatch(args []string) error {
	cf := newClientFlags("watch", "[TYPE ...] [-- CMD [ARG ...]]", "Streams registry events of the given types (all when none), following node\nfailures without a gap. Runs until Ctrl-C (or -timeout, if set).\n\nWith -- CMD, runs CMD once per event instead of printing it (as consul watch's\nhandler and etcdctl watch -- CMD), in order, each run after the last one ended:\nthe event as JSON on its stdin, and in its environment PLUGREG_WATCH_INDEX,\nPLUGREG_WATCH_EVENT (registered, updated, deregistered, expired, reset),\nPLUGREG_WATCH_TYPE, PLUGREG_WATCH_NAME and PLUGREG_WATCH_ALLOC. A handler that\nfails is reported on stderr and the watch goes on.")
	index := cf.fs.Uint64("index", 0, "start after this index (0: from now)")
	from0 := cf.fs.Bool("all", false, "start from index 0: every event the cluster's journal still holds, or, when it no longer reaches back that far, one reset with the full state; then the changes")
	flt := cf.fs.String("filter", "", "only the changes whose instance matches this expression (docs/api.md, Filters)")
	cf.fs.Lookup("timeout").DefValue = "0 (none)"
	*cf.timeout = 0
	if err := cf.parseArgs(args); err != nil {
		return err
	}
	if len(args) > 0 && args[len(args)-1] == "--" {
		return usageErrorf(cf.fs, "-- needs a command to run per event")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cf.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *cf.timeout)
		defer cancel()
	}
	from := *index
	if from == 0 && !*from0 {
		_, meta, err := c.Types(ctx, nil)
		if err != nil {
			return err
		}
		from = meta.Index
	}
	if *flt != "" {
		// Watch retries a stream refused for its filter; a list read with
		// the filter answers its error (and position) once. Any type will do:
		// the filter is checked before the list is read.
		typ := "any"
		if len(cf.args) > 0 {
			typ = cf.args[0]
		}
		if _, _, err := c.List(ctx, typ, &client.QueryOptions{Filter: *flt, PerPage: 1, Stale: true}); err != nil {
			return err
		}
	}
	handle := cf.printEvent
	if len(cf.dashArgs) > 0 {
		handle = eventHandler(ctx, cf.dashArgs)
	} else if !cf.out.structured() && !cf.out.noHeaders {
		fmt.Printf("%-8s %-13s %-12s %-16s %-10s %s\n", "INDEX", "EVENT", "TYPE", "NAME", "ALLOC", "NEWEST")
	}
	stream := c.Stream(ctx, from, client.WatchOptions{Types: cf.args, Filter: *flt})
	for ev := range stream.Events() {
		if err := handle(ev); err != nil {
			return err
		}
	}
	if err := stream.Err(); err != nil {
		// The token was deleted, or no longer reads these types.
		return fmt.Errorf("watch ended: %w", err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return ctx.Err()
}

// printEvent prints one event in the chosen format: JSON and YAML one
// document per event (JSON lines, YAML with "---"), a template once per
// event.
func (cf *clientFlags) printEvent(ev *api.Event) error {
	switch {
	case cf.out.format == "json":
		return json.NewEncoder(os.Stdout).Encode(ev)
	case cf.out.format == "yaml":
		fmt.Println("---")
	case !cf.out.structured():
		printEventRow(ev)
		return nil
	}
	return cf.out.print(ev, nil)
}

// eventHandler runs argv once per event, as watch -- CMD does.
func eventHandler(ctx context.Context, argv []string) func(*api.Event) error {
	return func(ev *api.Event) error {
		body, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdin = bytes.NewReader(append(body, '\n'))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(),
			"PLUGREG_WATCH_INDEX="+strconv.FormatUint(ev.Index, 10),
			"PLUGREG_WATCH_EVENT="+string(ev.EventType))
		if ev.Info != nil {
			cmd.Env = append(cmd.Env, "PLUGREG_WATCH_TYPE="+ev.Info.Type, "PLUGREG_WATCH_NAME="+ev.Info.Name, "PLUGREG_WATCH_ALLOC="+ev.Info.AllocID)
		}
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return nil // Ctrl-C reached the handler too
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				return fmt.Errorf("handler %s: %w", argv[0], err) // it cannot run at all
			}
			fmt.Fprintf(os.Stderr, "plugreg watch: handler %s for the event at index %d: %v\n", argv[0], ev.Index, err)
		}
		return nil
	}
}

func printEventRow(ev *api.Event) {
	if ev.EventType == api.EventReset {
		fmt.Printf("%-8d %-13s (%d instances follow)\n", ev.Index, ev.EventType, len(ev.Plugins))
		for _, p := range ev.Plugins {
			fmt.Printf("%-8s %-13s %-12s %-16s %-10s\n", "", "", p.Type, p.Name, p.AllocID)
		}
		return
	}
	newest := "-"
	if ev.Current != nil {
		newest = ev.Current.AllocID
	}
	fmt.Printf("%-8d %-13s %-12s %-16s %-10s %s\n", ev.Index, ev.EventType, ev.Info.Type, ev.Info.Name, ev.Info.AllocID, newest)
}

func runMembers(args []string) error {
	cf := newClientFlags("members", "", "Lists the servers and client agents the answering node knows of.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		ms, err := c.Members(ctx)
		if err != nil {
			return err
		}
		// Servers first, then client agents, each by name.
		sort.Slice(ms, func(i, j int) bool {
			if ms[i].Role != ms[j].Role {
				return ms[i].Role == api.RoleServer
			}
			return ms[i].Name < ms[j].Name
		})
		return cf.out.print(ms, func() table {
			t := table{header: "NODE\tROLE\tSTATUS\tRAFT\tHTTP\tSERVER\tGOSSIP"}
			for _, m := range ms {
				raft := "follower"
				if m.Leader {
					raft = "leader"
				}
				if !m.Voter {
					raft = "-"
				}
				server := m.RaftAddr
				if server == "" {
					server = "-"
				}
				t.rows = append(t.rows, []string{m.Name, m.Role, m.Status, raft, m.HTTPAddr, server, m.GossipAddr})
			}
			return t
		})
	})
}

func runPeers(args []string) error {
	cf := newClientFlags("peers", "", "Lists the server addresses in the Raft configuration.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		peers, err := c.Peers(ctx)
		if err != nil {
			return err
		}
		return cf.out.print(peers, lines(peers))
	})
}

func runLeader(args []string) error {
	cf := newClientFlags("leader", "", "Shows the leader's server address (empty when there is none).")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		l, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		return cf.out.print(l, lines([]string{l}))
	})
}

func runLeave(args []string) error {
	cf := newClientFlags("leave", "", "Makes the node at -addr (the first address) leave the cluster gracefully:\nit hands over leadership if it leads, is removed from Raft, and stops.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		if err := c.Leave(ctx); err != nil {
			return err
		}
		fmt.Printf("%s is leaving the cluster\n", c.Addrs()[0])
		return nil
	})
}
