package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tlsutil"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	fs      *flag.FlagSet
	args    []string // positional arguments, wherever they stood
	addr    *string
	token   *string
	json    *bool
	timeout *time.Duration
	tls     tlsutil.ClientOptions
}

func newClientFlags(name, argsUsage, help string) *clientFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cf := &clientFlags{fs: fs}
	def := os.Getenv("PLUGREG_ADDR")
	if def == "" {
		def = "127.0.0.1:7700"
	}
	cf.addr = fs.String("addr", def, "node HTTP addresses, comma-separated (env PLUGREG_ADDR)")
	cf.token = fs.String("token", os.Getenv("PLUGREG_TOKEN"), "ACL token (env PLUGREG_TOKEN)")
	fs.StringVar(&cf.tls.CAFile, "ca-file", os.Getenv("PLUGREG_CACERT"), "PEM CA that verifies the servers' HTTPS certificates; with it, addresses without a scheme are https (env PLUGREG_CACERT)")
	fs.StringVar(&cf.tls.CertFile, "client-cert", os.Getenv("PLUGREG_CLIENT_CERT"), "PEM client certificate, for agents that -verify-incoming (env PLUGREG_CLIENT_CERT)")
	fs.StringVar(&cf.tls.KeyFile, "client-key", os.Getenv("PLUGREG_CLIENT_KEY"), "PEM key of -client-cert (env PLUGREG_CLIENT_KEY)")
	fs.StringVar(&cf.tls.ServerName, "tls-server-name", os.Getenv("PLUGREG_TLS_SERVER_NAME"), "name the agent's certificate must carry (empty: the address's host) (env PLUGREG_TLS_SERVER_NAME)")
	cf.json = fs.Bool("json", false, "print JSON")
	cf.timeout = fs.Duration("timeout", 30*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: plugreg %s [flags] %s\n\n%s\n\n", name, argsUsage, help)
		fs.PrintDefaults()
	}
	return cf
}

// parseArgs parses flags wherever they stand among the positional
// arguments ("get csi ebs -json" as well as "get -json csi ebs").
func (cf *clientFlags) parseArgs(args []string) error {
	cf.args = nil
	for {
		if err := cf.fs.Parse(args); err != nil {
			return errUsage
		}
		rest := cf.fs.Args()
		if len(rest) == 0 {
			return nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			cf.args = append(cf.args, rest...)
			return nil
		}
		cf.args = append(cf.args, rest[0])
		args = rest[1:]
	}
}

func (cf *clientFlags) parse(args []string, nargs ...int) error {
	if err := cf.parseArgs(args); err != nil {
		return err
	}
	ok := len(nargs) == 0
	for _, n := range nargs {
		ok = ok || len(cf.args) == n
	}
	if !ok {
		cf.fs.Usage()
		return errUsage
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
	cfg := client.Config{Addrs: strings.Split(addrs, ","), Token: *cf.token}
	if cf.tls != (tlsutil.ClientOptions{}) || strings.Contains(addrs, "https://") {
		tc, err := tlsutil.ClientConfig(cf.tls)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	return client.New(cfg)
}

func (cf *clientFlags) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	return ctx, func() { stop(); cancel() }
}

func printJSON(v interface{}) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(header string, rows [][]string) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
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
	if *renew && info.TTL == 0 {
		fmt.Fprintln(cf.fs.Output(), "plugreg register: -renew keeps a lease: give it a -ttl")
		return errUsage
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
	if *cf.json {
		if err := printJSON(res); err != nil {
			return err
		}
	} else {
		fmt.Printf("%s %s/%s/%s at index %d\n", res.Result, info.Type, info.Name, info.AllocID, res.Index)
	}
	if !*renew {
		return nil
	}
	cancel() // the hold runs until a signal, not -timeout
	return holdLease(c, &info, res, *cf.timeout)
}

func runDeregister(args []string) error {
	cf := newClientFlags("deregister", "TYPE NAME ALLOC | -node NODE", "Deregisters one plugin instance, or with -node every instance of a node.")
	nodeID := cf.fs.String("node", "", "deregister every plugin of this node")
	if err := cf.parseArgs(args); err != nil {
		return err
	}
	if (*nodeID == "") == (len(cf.args) != 3) || (*nodeID != "" && len(cf.args) != 0) {
		cf.fs.Usage()
		return errUsage
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
	if *cf.json {
		return printJSON(res)
	}
	fmt.Printf("%s %s at index %d\n", res.Result, what, res.Index)
	return nil
}

func queryFlags(cf *clientFlags) *bool {
	return cf.fs.Bool("stale", false, "read this node's state without asking the leader (may be behind)")
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
		if *cf.json {
			return printJSON(list)
		}
		table(pluginHeader, pluginRows(list))
		noun := "plugins"
		if len(list) == 1 {
			noun = "plugin"
		}
		fmt.Printf("(%d %s at index %d)\n", len(list), noun, meta.Index)
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
		if *cf.json {
			return printJSON(cov)
		}
		var rows [][]string
		for _, l := range []struct {
			state string
			nodes []string
		}{{"covered", cov.Covered}, {"missing", cov.Missing}, {"suspect", cov.Suspect}, {"orphaned", cov.Orphaned}} {
			for _, n := range l.nodes {
				rows = append(rows, []string{n, l.state})
			}
		}
		table("NODE\tSTATE", rows)
		fmt.Printf("(%s: %d live nodes, %d covered, %d missing, %d suspect, %d orphaned instances, at index %d)\n",
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
			if *cf.json {
				return printJSON(p)
			}
			table(pluginHeader, pluginRows([]*api.PluginInfo{p}))
			return nil
		}
		list, _, err := c.Instances(ctx, a[0], a[1], q)
		if err != nil {
			return err
		}
		if *cf.json {
			return printJSON(list)
		}
		table(pluginHeader, pluginRows(list))
		return nil
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
		if *cf.json {
			return printJSON(types)
		}
		for _, t := range types {
			fmt.Println(t)
		}
		return nil
	})
}

func runWatch(args []string) error {
	cf := newClientFlags("watch", "[TYPE ...]", "Streams registry events of the given types (all when none), following\nnode failures without a gap. Runs until Ctrl-C (or -timeout, if set).")
	index := cf.fs.Uint64("index", 0, "start after this index (0: from now)")
	from0 := cf.fs.Bool("all", false, "start from the beginning: a reset with the full state, then changes")
	flt := cf.fs.String("filter", "", "only the changes whose instance matches this expression (docs/api.md, Filters)")
	cf.fs.Lookup("timeout").DefValue = "0 (none)"
	*cf.timeout = 0
	if err := cf.parseArgs(args); err != nil {
		return err
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
	enc := json.NewEncoder(os.Stdout)
	if !*cf.json {
		fmt.Printf("%-8s %-13s %-12s %-16s %-10s %s\n", "INDEX", "EVENT", "TYPE", "NAME", "ALLOC", "NEWEST")
	}
	stream := c.Stream(ctx, from, client.WatchOptions{Types: cf.args, Filter: *flt})
	for ev := range stream.Events() {
		if *cf.json {
			if err := enc.Encode(ev); err != nil {
				return err
			}
			continue
		}
		printEvent(ev)
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

func printEvent(ev *api.Event) {
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
		if *cf.json {
			return printJSON(ms)
		}
		// Servers first, then client agents, each by name.
		sort.Slice(ms, func(i, j int) bool {
			if ms[i].Role != ms[j].Role {
				return ms[i].Role == api.RoleServer
			}
			return ms[i].Name < ms[j].Name
		})
		var rows [][]string
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
			rows = append(rows, []string{m.Name, m.Role, m.Status, raft, m.HTTPAddr, server, m.GossipAddr})
		}
		table("NODE\tROLE\tSTATUS\tRAFT\tHTTP\tSERVER\tGOSSIP", rows)
		return nil
	})
}

func runPeers(args []string) error {
	cf := newClientFlags("peers", "", "Lists the server addresses in the Raft configuration.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		peers, err := c.Peers(ctx)
		if err != nil {
			return err
		}
		if *cf.json {
			return printJSON(peers)
		}
		for _, p := range peers {
			fmt.Println(p)
		}
		return nil
	})
}

func runLeader(args []string) error {
	cf := newClientFlags("leader", "", "Shows the leader's server address (empty when there is none).")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		l, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		if *cf.json {
			return printJSON(l)
		}
		fmt.Println(l)
		return nil
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
