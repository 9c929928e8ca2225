// Command plugreg-bench measures plugreg against etcd on the same machine,
// in the same run, with the same load generator: it starts a three-member
// etcd cluster (Debian's etcd-server, installed when missing) and a
// three-node plugreg cluster as real processes on loopback, drives both
// with the same workloads at several concurrencies, and prints both
// systems' throughput and latency percentiles with the plugreg/etcd ratio.
//
// With -agents N it runs the client-agent scale test instead, plugreg only
// (etcd has no agent): N `plugreg agent -client` processes on their own
// loopback addresses, each discovering -agent-sockets kubelet plugins that
// the bench serves in its plugins dir; it times the start until every
// server lists every instance, reads each agent's memory, kills some agents
// with SIGKILL and times until the servers reap their instances, and
// restarts them (agents.go).
//
// With -stub-sessions N it measures the plugin SDK: N plugins (package
// stub) connected to one client agent process, against N etcd clients each
// with a lease kept alive, its key and a watch on one etcd member: memory
// and CPU per session, the fan-out of a burst of writes to all of them,
// and (plugreg) the same burst with sessions that never read (stubs.go).
//
// With -fleet it runs the fleet simulator, plugreg only: three servers on
// 127.0.3.1-3 and -fleet-hosts simulated hosts, each a real client agent
// (agent.Client, agent.Host) with 20 plugins, packed many per host process
// (the bench started again as -fleet-hosts-child); the first
// -fleet-gossip-hosts gossip, the others are given the servers' addresses.
// It times the cold start until every server lists every instance, the
// fleet at rest, a churn with watchers (commit -> last watcher), a
// snapshot, a restart of every server, a leader kill and dark hosts, at
// each size the fleet grows through (fleet.go).
//
// Every process, socket and temp dir it creates is removed at the end,
// also on error and on Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	duration     time.Duration
	clients      []int
	workloads    map[string]bool
	rounds       int
	watchers     int
	agentProfile string
	jsonOut      bool
	keep         bool
	dir          string
	plugregBin   string
	plugregFlags []string
	etcdFlags    []string
	// A second plugreg cluster, the baseline, in the same run (for
	// before/after ratios of one change): its binary and flags.
	baselineBin string
	// baselineWatchJSON: the baseline's watchers read the JSON stream.
	baselineWatchJSON bool
	// baselineWriteJSON: the baseline's clients register with JSON bodies.
	baselineWriteJSON bool
	// tls: plugreg runs on mutual TLS and the baseline (same binary and
	// flags) without: plugreg/baseline is TLS's cost.
	tls           bool
	baselineFlags []string
	baseline      bool
	profileDir    string
	profileSecs   int
	// profileWorkload and profileClients choose the -profile cell.
	profileWorkload string
	profileClients  int
	// memberDiskSync, when positive, puts every member on a disk of its
	// own whose fsync takes this long (memberDisks).
	memberDiskSync time.Duration
	scale          bool
	scaleNames     int
	scaleAllocs    int
	scaleTypes     int
	scaleClients   int
	scaleEtcd      bool

	agents         int
	stubSessions   int
	stubSilent     int
	stubBurst      int
	agentSockets   int
	agentKill      int
	agentRestart   bool
	agentReapAfter time.Duration
	agentSettle    time.Duration
	agentTimeout   time.Duration
	agentProcs     int
	agentInterval  time.Duration

	stability        bool
	stabilityClients int
	stabilityLoad    time.Duration
	stabilityIdle    time.Duration

	// fleet: the -fleet mode's options (fleet.go); nil when off.
	fleet *fleetOptions

	selfProfile string
	// pauseIdle: SIGSTOP the systems not in the current cell (idle.go).
	pauseIdle bool
}

var allWorkloads = []string{"register", "deregister", "list", "list-stale", "watch", "failover"}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-fleet-hosts-child" {
		// A host process of the fleet simulator, started by the bench.
		if err := runFleetChild(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "plugreg-bench -fleet-hosts-child:", err)
			os.Exit(1)
		}
		return
	}
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "plugreg-bench:", err)
		os.Exit(2)
	}
	if opts.selfProfile != "" {
		// The load generator shares the machine with the clusters: its
		// own cost (the clients' encoding, HTTP, gRPC) is part of what a
		// cell's throughput pays for.
		f, err := os.Create(opts.selfProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "plugreg-bench: -bench-cpuprofile:", err)
			os.Exit(2)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "plugreg-bench:", err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("plugreg-bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: plugreg-bench [flags]\n\nRuns plugreg and etcd side by side (3 members each, loopback) and prints one table.\nWith -agents N: client agents at scale, plugreg only.\nRun it from the plugreg repository (it builds ./cmd/plugreg) or pass -plugreg-bin.\n\n")
		fs.PrintDefaults()
	}
	o := &options{}
	var clients, workloads, pflags, eflags, bflags string
	quick := fs.Bool("quick", false, "a one-minute smoke run: 1s cells at 1 and 64 clients, 3 failover rounds")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "duration of each cell (one system, one workload, one concurrency)")
	fs.StringVar(&clients, "clients", "1,16,64,256", "comma-separated concurrencies")
	fs.StringVar(&workloads, "workloads", strings.Join(allWorkloads, ","), "comma-separated workloads: "+strings.Join(allWorkloads, ", "))
	fs.IntVar(&o.rounds, "failover-rounds", 10, "leader kills per system")
	fs.IntVar(&o.watchers, "watchers", 100, "watchers per system in the watch workload, spread over the nodes")
	fs.BoolVar(&o.jsonOut, "json", false, "print the results as JSON instead of a table")
	fs.BoolVar(&o.keep, "keep", false, "keep the temp dir (data and logs) for inspection")
	fs.StringVar(&o.dir, "dir", "", "parent of the temp dir (default: the system temp dir); both systems' data go there, on the same disk")
	fs.StringVar(&o.plugregBin, "plugreg-bin", "", "prebuilt plugreg binary (default: go build ./cmd/plugreg)")
	fs.StringVar(&pflags, "plugreg-flags", "", "extra flags for every plugreg agent, space-separated (e.g. \"-log-store wal\"); {otlp-sink} stands for the URL of an OTLP/HTTP trace sink the bench serves (\"-trace-endpoint {otlp-sink} -trace-sample-rate 1\": tracing on)")
	fs.StringVar(&eflags, "etcd-flags", "", "extra flags for every etcd member, space-separated")
	fs.StringVar(&o.baselineBin, "baseline-bin", "", "also run a baseline plugreg cluster from this binary in every cell (table workloads only) and print plugreg/baseline ratios")
	fs.BoolVar(&o.tls, "tls", false, "run plugreg with mutual TLS on every port (and the bench's clients on HTTPS with a client certificate), and a baseline plugreg cluster without: plugreg/baseline is the cost of TLS")
	fs.BoolVar(&o.baselineWriteJSON, "baseline-write-json", false, "the baseline cluster's clients send registrations as JSON instead of protobuf (to measure the encoding; a cluster of a release before protobuf bodies gets JSON anyway)")
	fs.BoolVar(&o.baselineWatchJSON, "baseline-watch-json", false, "the baseline cluster's watchers read the JSON event stream instead of protobuf (to measure the encoding)")
	fs.StringVar(&bflags, "baseline-flags", "", "also run a baseline plugreg cluster with these flags instead of -plugreg-flags (binary: -baseline-bin, else plugreg's)")
	fs.StringVar(&o.profileDir, "profile", "", "write CPU profiles of every plugreg member and the leader's allocation profile during a 64-client register cell to this dir")
	fs.IntVar(&o.profileSecs, "profile-seconds", 10, "length of the -profile cell")
	fs.StringVar(&o.profileWorkload, "profile-workload", "register", "the -profile cell, every member profiled: register (64 writers; also the leader's allocations) or watch (-profile-clients writers and -watchers watchers spread over the members)")
	fs.DurationVar(&o.memberDiskSync, "member-disk-sync", 0, "put every member of both systems on a disk of its own (an in-memory lazyfs, FUSE, needs root) whose every fsync takes this long, as servers with a local disk each; 0: the members share this machine's disk")
	fs.IntVar(&o.profileClients, "profile-clients", 256, "writers of the -profile-workload watch cell")
	fs.BoolVar(&o.scale, "scale", false, "run the scale test instead: 1M instances, memory, snapshot, restart")
	fs.IntVar(&o.scaleNames, "scale-names", 10000, "scale: names in total, spread over -scale-types types")
	fs.IntVar(&o.scaleAllocs, "scale-allocs", 100, "scale: instances (allocations) per name")
	fs.IntVar(&o.scaleTypes, "scale-types", 10, "scale: plugin types")
	fs.IntVar(&o.scaleClients, "scale-clients", 128, "scale: concurrent writers while loading")
	fs.BoolVar(&o.scaleEtcd, "scale-etcd", true, "scale: load etcd with the same instances and report its figures too")
	fs.IntVar(&o.agents, "agents", 0, "run the client-agent scale test instead (plugreg only): this many `plugreg agent -client` processes, each on its own loopback address")
	fs.IntVar(&o.stubSessions, "stub-sessions", 0, "run the plugin SDK test instead (plugreg only): this many plugins (package stub, in the bench) connected to one client agent process")
	fs.IntVar(&o.stubSilent, "stub-silent", 10, "stub-sessions: sessions that never read their events, added for a second burst")
	fs.IntVar(&o.stubBurst, "stub-burst", 100, "stub-sessions: writes in each burst delivered to every plugin")
	fs.IntVar(&o.agentSockets, "agent-sockets", 10, "agents: kubelet plugin sockets per agent, served by the bench")
	fs.IntVar(&o.agentKill, "agent-kill", 20, "agents: kill -9 this many agents and time until their instances are gone (0: skip)")
	fs.BoolVar(&o.agentRestart, "agent-restart", true, "agents: restart the killed agents and time until their instances are back")
	fs.DurationVar(&o.agentReapAfter, "agent-reap-after", 5*time.Second, "agents: the servers' -node-reap-after")
	fs.DurationVar(&o.agentSettle, "agent-settle", 10*time.Second, "agents: wait this long after start before reading memory (and CPU at rest over it)")
	fs.DurationVar(&o.agentTimeout, "agent-timeout", 5*time.Minute, "agents: give up on a phase after this long")
	fs.StringVar(&o.agentProfile, "agent-profile", "", "agents: serve pprof on every agent and write agent 0's CPU profile over the settle (at rest) to this dir")
	fs.IntVar(&o.agentProcs, "agent-gomaxprocs", 1, "agents: GOMAXPROCS of every agent process (0: Go's default, the machine's CPUs)")
	fs.DurationVar(&o.agentInterval, "agent-start-interval", 0, "agents: wait this long between agent starts (0: all at once)")
	fs.BoolVar(&o.pauseIdle, "pause-idle", true, "stop (SIGSTOP) every other system's processes during a system's cell and failover round; resume it and wait for a steady leader before its own")
	fs.StringVar(&o.selfProfile, "bench-cpuprofile", "", "write a CPU profile of the bench process itself (the load generator's clients) to this file")
	fs.BoolVar(&o.stability, "stability", false, "run the stability test instead (plugreg only): writers, then idle, counting every leader change")
	fs.IntVar(&o.stabilityClients, "stability-clients", 64, "stability: concurrent writers")
	fs.DurationVar(&o.stabilityLoad, "stability-load", 10*time.Minute, "stability: how long the writers run")
	fs.DurationVar(&o.stabilityIdle, "stability-idle", 10*time.Minute, "stability: how long the cluster then stays idle")
	fleet := fs.Bool("fleet", false, "run the fleet simulator instead (plugreg only): three servers and -fleet-hosts simulated hosts, each a real client agent (agent.Client, agent.Host) with -fleet-plugins plugins, packed many per host process")
	fo := &fleetOptions{}
	var fleetSizes, fleetScenarios string
	fs.StringVar(&fleetSizes, "fleet-hosts", "100", "fleet: hosts, or increasing sizes the fleet grows through (e.g. 100,1000,10000): at each size the new hosts start at once, then rest and churn are measured (the curve)")
	fs.IntVar(&fo.perProc, "fleet-hosts-per-proc", 0, "fleet: hosts per host process (0: a tenth of the fleet, 10 to 500)")
	fs.IntVar(&fo.gossipHosts, "fleet-gossip-hosts", 200, "fleet: hosts (spread over the host processes) that run real memberlist gossip; the others are given the servers' addresses (agent.Config.StaticServers): the servers' gossip never sees them, so suspect marks and reaping are measured on these only")
	fs.IntVar(&fo.plugins, "fleet-plugins", 20, "fleet: plugins per host (the same names on every host)")
	fs.IntVar(&fo.watchers, "fleet-watchers", 1000, "fleet: watchers (event streams of the Go client on the fleet's plugin types) spread over the servers, for the churn")
	fs.Float64Var(&fo.churnRate, "fleet-churn-rate", 20, "fleet: churn writes per second (plugin updates through the hosts' agents)")
	fs.DurationVar(&fo.churnFor, "fleet-churn-duration", 30*time.Second, "fleet: how long each churn runs")
	fs.DurationVar(&fo.settle, "fleet-settle", 10*time.Second, "fleet: wait this long after a start before measuring the fleet at rest")
	fs.DurationVar(&fo.idle, "fleet-idle", 10*time.Second, "fleet: the window the fleet at rest is measured over (hosts' CPU, leader's CPU)")
	fs.DurationVar(&fo.timeout, "fleet-timeout", 10*time.Minute, "fleet: give up on a phase after this long")
	fs.DurationVar(&fo.darkFor, "fleet-dark-duration", 60*time.Second, "fleet: how long the dark hosts stay stopped (memberlist's LAN suspicion timeout starts at up to ~55 s with 200 members and shrinks with confirmations: shorter, and the gossiping dark hosts may never be marked failed)")
	fs.Float64Var(&fo.darkShare, "fleet-dark-share", 0.1, "fleet: share of the host processes (so of the hosts) the dark scenario stops with SIGSTOP")
	fs.StringVar(&fo.signalType, "fleet-signal-type", "fleet-signal", "fleet: the type every host's upstream event stream subscribes to; the bench writes its markers there")
	fs.IntVar(&fo.nice, "fleet-hosts-nice", 10, "fleet: niceness of the host processes: on a real fleet the hosts' CPU is their own machines', so here they must not take the servers'")
	fs.StringVar(&fo.profileDir, "fleet-profile", "", "fleet: write CPU profiles of the leader at rest and during each churn to this dir")
	fs.StringVar(&fleetScenarios, "fleet-scenarios", strings.Join(allFleetScenarios, ","), "fleet: comma-separated scenarios after the start(s), in this order: "+strings.Join(allFleetScenarios, ", "))
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *fleet {
		if err := fo.resolve(fleetSizes, fleetScenarios); err != nil {
			return nil, err
		}
		o.fleet = fo
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["duration"] {
			o.duration = time.Second
		}
		if !set["clients"] {
			clients = "1,64"
		}
		if !set["failover-rounds"] {
			o.rounds = 3
		}
		if !set["watchers"] {
			o.watchers = 30
		}
	}
	for _, c := range strings.Split(clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-clients: bad concurrency %q", c)
		}
		o.clients = append(o.clients, n)
	}
	o.workloads = map[string]bool{}
	for _, w := range strings.Split(workloads, ",") {
		w = strings.TrimSpace(w)
		ok := false
		for _, a := range allWorkloads {
			ok = ok || a == w
		}
		if !ok {
			return nil, fmt.Errorf("-workloads: unknown workload %q", w)
		}
		o.workloads[w] = true
	}
	if o.workloads["deregister"] && !o.workloads["register"] {
		return nil, errors.New("-workloads: deregister removes what register added; select both")
	}
	o.plugregFlags, o.etcdFlags = strings.Fields(pflags), strings.Fields(eflags)
	o.baseline = set["baseline-bin"] || set["baseline-flags"] || o.baselineWatchJSON || o.baselineWriteJSON || o.tls
	o.baselineFlags = o.plugregFlags
	if set["baseline-flags"] {
		o.baselineFlags = strings.Fields(bflags)
	}
	if o.stability && (o.agents > 0 || o.stubSessions > 0 || o.scale || o.stabilityClients < 1 || o.stabilityLoad <= 0 || o.stabilityIdle < 0) {
		return nil, errors.New("-stability: needs -stability-clients and -stability-load positive, -stability-idle 0 or more, and does not mix with -agents, -stub-sessions or -scale")
	}
	if o.profileWorkload != "register" && o.profileWorkload != "watch" {
		return nil, fmt.Errorf("-profile-workload %q: want register or watch", o.profileWorkload)
	}
	if o.memberDiskSync < 0 || (o.memberDiskSync > 0 && (o.agents > 0 || o.stability || o.fleet != nil)) {
		return nil, errors.New("-member-disk-sync: 0 or more, and only for the comparison with etcd (not -agents, -stability or -fleet)")
	}
	if o.rounds < 1 || o.watchers < 1 || o.duration <= 0 {
		return nil, errors.New("-failover-rounds, -watchers and -duration must be positive")
	}
	if o.stubSessions < 0 || o.stubSilent < 0 || o.stubBurst < 1 || (o.stubSessions > 0 && o.agents > 0) {
		return nil, errors.New("-stub-sessions and -stub-silent (0 or more), -stub-burst (1 or more): out of range; -stub-sessions and -agents do not mix")
	}
	if o.agents < 0 || o.agents > 250*254 || o.agentSockets < 1 || o.agentKill < 0 || (o.agents > 0 && o.agentKill > o.agents) ||
		o.agentReapAfter <= 0 || o.agentSettle < 0 || o.agentTimeout <= 0 || o.agentProcs < 0 || o.agentInterval < 0 {
		return nil, errors.New("-agents (0 to 63500), -agent-sockets (1 or more), -agent-kill (0 to -agents), -agent-reap-after and -agent-timeout (positive), -agent-settle: out of range")
	}
	return o, nil
}

// report is what -json prints.
type report struct {
	Date         string               `json:"date"`
	GoVersion    string               `json:"go_version"`
	CPUs         int                  `json:"cpus"`
	EtcdVersion  string               `json:"etcd_version"`
	Args         []string             `json:"args"`
	RecordBytes  int                  `json:"record_bytes"`
	Cells        []*cell              `json:"cells,omitempty"`
	Failover     map[string]stats     `json:"failover,omitempty"`
	FailoverRaw  map[string][]float64 `json:"failover_samples_ms,omitempty"`
	FailoverRate ratio                `json:"failover_ratio_plugreg_over_etcd"`
	// FailoverBaseline is plugreg/baseline, with -baseline-*.
	FailoverBaseline *ratio           `json:"failover_ratio_plugreg_over_baseline,omitempty"`
	Scale            *scaleReport     `json:"scale,omitempty"`
	Agents           *agentsReport    `json:"agents,omitempty"`
	Stubs            *stubsReport     `json:"stubs,omitempty"`
	Stability        *stabilityReport `json:"stability,omitempty"`
	Fleet            *fleetReport     `json:"fleet,omitempty"`
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func run(ctx context.Context, o *options, out io.Writer) (err error) {
	// The client-agent mode runs plugreg alone: etcd has no agent. The
	// stability run is plugreg's own timeouts against this machine.
	withEtcd := o.agents == 0 && !o.stability && o.fleet == nil
	var etcdBin string
	if withEtcd {
		if etcdBin, err = ensureEtcd(logf); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp(o.dir, "plugreg-bench-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	sink, err := startOTLPSinkFor(&o.plugregFlags, &o.baselineFlags)
	if err != nil {
		return fmt.Errorf("otlp sink: %w", err)
	}
	defer stopOTLPSink(sink)
	var pc, bc *plugregCluster
	var ec *etcdCluster
	var disks *memberDisks
	if o.memberDiskSync > 0 {
		disks = &memberDisks{sync: o.memberDiskSync}
	}
	defer func() {
		// Stop every process before removing their data, also when the
		// run failed or was interrupted.
		if pc != nil {
			pc.stop()
		}
		if bc != nil {
			bc.stop()
		}
		if ec != nil {
			ec.stop()
		}
		if uerr := disks.unmountAll(); uerr != nil && err == nil {
			err = uerr
		}
		if o.keep {
			logf("kept %s", dir)
			return
		}
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = fmt.Errorf("remove %s: %w", dir, rerr)
		}
	}()

	bin := o.plugregBin
	if bin == "" {
		if bin, err = buildPlugreg(ctx, dir); err != nil {
			return err
		}
	}
	rep := &report{Date: time.Now().Format("2006-01-02"), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Args: os.Args[1:]}
	if withEtcd {
		if v, verr := exec.Command(etcdBin, "--version").Output(); verr == nil {
			rep.EtcdVersion = strings.TrimPrefix(strings.SplitN(string(v), "\n", 2)[0], "etcd Version: ")
		}
	}
	if b, merr := json.Marshal(rec{Type: "bench", Name: "name-00042", Alloc: "c0064-0000042"}.pluginInfo()); merr == nil {
		rep.RecordBytes = len(b)
	}

	if o.fleet != nil {
		rep.Fleet, err = runFleet(ctx, o, bin, dir)
		if rep.Fleet != nil && (err == nil || len(rep.Fleet.Steps) > 0) {
			if o.jsonOut {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if jerr := enc.Encode(rep); jerr != nil && err == nil {
					err = jerr
				}
			} else {
				printFleet(out, rep)
			}
		}
		return err
	}
	if !withEtcd {
		// Info level for the reap log lines ("reaped plugins of dead
		// node"); the bench's flags come first, so -plugreg-flags wins.
		flags := append([]string{"-node-reap-after", o.agentReapAfter.String(), "-log-level", "info"}, o.plugregFlags...)
		logf("starting plugreg (3 servers) in %s", dir)
		if pc, err = startPlugreg(bin, dir, flags); err != nil {
			return err
		}
		if err := pc.waitReady(ctx, 60*time.Second); err != nil {
			return err
		}
		if o.stability {
			rep.Stability, err = runStability(ctx, o, pc)
		} else {
			rep.Agents, err = runAgents(ctx, o, pc, bin, dir)
		}
		if err != nil {
			return err
		}
		if o.jsonOut {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		fmt.Fprintf(out, "plugreg %s, %d CPUs, %s\n", rep.Date, rep.CPUs, rep.GoVersion)
		if rep.Stability != nil {
			printStability(out, rep.Stability)
		} else {
			printAgents(out, rep.Agents)
		}
		return nil
	}
	logf("starting etcd %s and plugreg (3 members each) in %s", rep.EtcdVersion, dir)
	if disks != nil {
		logf("every member on a disk of its own whose fsync takes %v (-member-disk-sync)", disks.sync)
		for i := 0; i < members; i++ {
			dirs := []string{etcdDataDir(dir, i), plugregDataDir(dir, "plugreg", i)}
			if o.baseline {
				dirs = append(dirs, plugregDataDir(dir, "baseline", i))
			}
			for _, d := range dirs {
				if err := disks.mount(d); err != nil {
					return err
				}
			}
		}
	}
	if ec, err = startEtcd(etcdBin, dir, o.etcdFlags); err != nil {
		return err
	}
	var bt *benchTLS
	if o.tls {
		if bt, err = newBenchTLS(dir); err != nil {
			return err
		}
	}
	if pc, err = startPlugregTLS("plugreg", 27000, bin, dir, o.plugregFlags, bt); err != nil {
		return err
	}
	if err := ec.waitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	if err := pc.waitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	systems := []system{&plugregSystem{c: pc}, &etcdSystem{c: ec}}
	if o.baseline {
		bbin := o.baselineBin
		if bbin == "" {
			bbin = bin
		}
		logf("starting the baseline plugreg (%s %s)", bbin, strings.Join(o.baselineFlags, " "))
		if bc, err = startPlugregAs("baseline", 29000, bbin, dir, o.baselineFlags); err != nil {
			return err
		}
		if err := bc.waitReady(ctx, 60*time.Second); err != nil {
			return err
		}
		bc.protobuf = bc.protobuf && !o.baselineWriteJSON
		systems = append(systems, &plugregSystem{c: bc, label: "baseline", watchJSON: o.baselineWatchJSON})
	}
	logf("clusters ready (plugreg clients register in %s)", map[bool]string{true: "protobuf", false: "JSON"}[pc.protobuf])

	if o.stubSessions > 0 {
		if rep.Stubs, err = runStubs(ctx, o, pc, ec, bin, dir); err != nil {
			return err
		}
	} else if o.scale {
		if rep.Scale, err = runScale(ctx, o, systems, dir); err != nil {
			return err
		}
	} else if o.profileDir != "" {
		if err := runProfile(ctx, o, systems[0].(*plugregSystem)); err != nil {
			return err
		}
	} else {
		if err := runTable(ctx, o, systems, rep); err != nil {
			return err
		}
	}

	if o.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(out, "plugreg vs etcd %s: %s, %d CPUs, %s, record %d bytes, %s per cell\n\n",
		rep.EtcdVersion, rep.Date, rep.CPUs, rep.GoVersion, rep.RecordBytes, o.duration)
	if len(rep.Cells) > 0 {
		printTable(out, rep.Cells)
		if o.baseline {
			printBaseline(out, rep.Cells)
		}
	}
	if rep.Failover != nil {
		p, e := rep.Failover["plugreg"], rep.Failover["etcd"]
		fmt.Fprintf(out, "\nfailover (kill -9 of the leader -> first acknowledged write), %d rounds each, ms:\n", o.rounds)
		fmt.Fprintf(out, "  plugreg p50 %s  max %s  samples %v\n", f(p.P50, 0), f(p.Max, 0), rep.FailoverRaw["plugreg"])
		fmt.Fprintf(out, "  etcd    p50 %s  max %s  samples %v\n", f(e.P50, 0), f(e.Max, 0), rep.FailoverRaw["etcd"])
		fmt.Fprintf(out, "  ratio plugreg/etcd: p50 %s  max %s\n", f(rep.FailoverRate.P50, 2), f(div(p.Max, e.Max), 2))
		if b, ok := rep.Failover["baseline"]; ok {
			fmt.Fprintf(out, "  baseline p50 %s  max %s  samples %v\n", f(b.P50, 0), f(b.Max, 0), rep.FailoverRaw["baseline"])
			fmt.Fprintf(out, "  ratio plugreg/baseline: p50 %s  max %s\n", f(rep.FailoverBaseline.P50, 2), f(div(p.Max, b.Max), 2))
		}
	}
	if rep.Scale != nil {
		printScale(out, rep.Scale)
	}
	if rep.Stubs != nil {
		printStubs(out, rep.Stubs)
	}
	return nil
}

// buildPlugreg builds ./cmd/plugreg of the plugreg module the bench is
// run from: the repository root, which tools/bench's go.mod replaces the
// product's module with, or the root itself.
func buildPlugreg(ctx context.Context, dir string) (string, error) {
	root, err := proctest.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("run plugreg-bench inside the plugreg repository, or pass -plugreg-bin: %w", err)
	}
	bin := filepath.Join(dir, "plugreg")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/plugreg")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/plugreg (in %s): %w\n%s", root, err, b)
	}
	return bin, nil
}

// runTable runs every selected workload at every concurrency on both
// systems, one cell after the other, alternating which system goes first
// so that drift in the machine's load favours neither.
func runTable(ctx context.Context, o *options, systems []system, rep *report) error {
	for _, s := range systems {
		if o.workloads["list"] || o.workloads["list-stale"] {
			if err := populateList(ctx, s); err != nil {
				return err
			}
		}
	}
	// Rotate which system goes first, cell by cell.
	order := func(k int) []system {
		k %= len(systems)
		return append(append([]system{}, systems[k:]...), systems[:k]...)
	}
	// Every way out continues what is paused (proc.stop does as well).
	idle := newIdlePauser(o.pauseIdle, systems)
	defer idle.resumeAll()
	k := 0
	for _, conc := range o.clients {
		registered := map[string][]rec{}
		var cells []*cell
		// add runs one cell: for each system in turn, the others paused
		// (-pause-idle), setup makes its clients and warms them up (one
		// request each, so that no client connects on the clock), then
		// the clock runs.
		add := func(workload string, setup func(s system) error, run func(s system) (stats, error)) error {
			c := &cell{Workload: workload, Clients: conc, Results: map[string]stats{}}
			for _, s := range order(k) {
				if err := idle.focus(ctx, s); err != nil {
					return err
				}
				if err := setup(s); err != nil {
					return err
				}
				st, err := measureCell(ctx, s, func() (stats, error) { return run(s) })
				if err != nil {
					return err
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.Results[s.name()] = st
				logf("%-10s %3d clients %-8s %8.0f %s/s p50 %6.2fms p99 %7.2fms p999 %7.2fms cpu %.3fms/op gen %.3fms/op %s errors %d missed %d %s",
					workload, conc, s.name(), st.Throughput, st.Unit, st.P50, st.P99, st.P999, st.ServerCPUPerOp, st.ClientCPUPerOp, raftLog(st.Raft), st.Errors, st.Missed, st.FirstErr)
			}
			k++
			c.computeRatio()
			cells = append(cells, c)
			return nil
		}
		wpools := map[string]*clientPool[writer]{}
		rpools := map[string]*clientPool[reader]{}
		closeAll := func() {
			for _, p := range wpools {
				p.close()
			}
			for _, p := range rpools {
				p.close()
			}
		}
		// writers makes s's writers the first time a cell of this
		// concurrency needs them, when s is sure to be running
		// (-pause-idle). Worker 0 on a follower, on both systems: the
		// 1-client cell measures the same path whichever node leads (a
		// write through a follower is forwarded to the leader).
		// Every cell then warms them up, outside its clock.
		writers := func(s system) error {
			if _, ok := wpools[s.name()]; !ok {
				l, err := s.leader(ctx)
				if err != nil {
					return err
				}
				p, err := newWriters(s, conc, l+1)
				if err != nil {
					return err
				}
				wpools[s.name()] = p
			}
			if err := warmWriters(ctx, wpools[s.name()]); err != nil {
				return fmt.Errorf("%s writers: %w", s.name(), err)
			}
			return nil
		}
		// readers makes and warms up a list cell's readers, all on a
		// follower of the leader of the moment.
		readers := func(stale bool) func(s system) error {
			return func(s system) error {
				if p, ok := rpools[s.name()]; ok {
					p.close()
					delete(rpools, s.name())
				}
				l, err := s.leader(ctx)
				if err != nil {
					return err
				}
				p, err := newReaders(s, conc, (l+1)%members)
				if err != nil {
					return err
				}
				rpools[s.name()] = p
				if err := warmReaders(ctx, p, stale); err != nil {
					return fmt.Errorf("%s readers: %w", s.name(), err)
				}
				return nil
			}
		}
		err := func() error {
			defer closeAll()
			tag := fmt.Sprintf("c%04d", conc)
			if o.workloads["register"] {
				if err := add("register", writers, func(s system) (stats, error) {
					st, done := registerCell(ctx, s, wpools[s.name()], conc, o.duration, tag)
					registered[s.name()] = done
					return st, nil
				}); err != nil {
					return err
				}
			}
			if o.workloads["deregister"] {
				if err := add("deregister", writers, func(s system) (stats, error) {
					return deregisterCell(ctx, wpools[s.name()], conc, o.duration, registered[s.name()]), nil
				}); err != nil {
					return err
				}
			}
			for _, stale := range []bool{false, true} {
				name := map[bool]string{false: "list", true: "list-stale"}[stale]
				if !o.workloads[name] {
					continue
				}
				label := map[bool]string{false: "list-lin-follower", true: "list-stale-follower"}[stale]
				if err := add(label, readers(stale), func(s system) (stats, error) {
					return listCell(ctx, rpools[s.name()], conc, o.duration, stale), nil
				}); err != nil {
					return err
				}
			}
			if o.workloads["watch"] {
				if err := add("watch", writers, func(s system) (stats, error) {
					return watchCell(ctx, s, wpools[s.name()], conc, o.watchers, o.duration, tag)
				}); err != nil {
					return err
				}
			}
			return nil
		}()
		rep.Cells = append(rep.Cells, cells...)
		if err != nil {
			return err
		}
	}
	if o.workloads["failover"] {
		rep.Failover, rep.FailoverRaw = map[string]stats{}, map[string][]float64{}
		samples := map[string][]time.Duration{}
		for r := 0; r < o.rounds; r++ {
			for _, s := range order(r) {
				if err := idle.focus(ctx, s); err != nil {
					return err
				}
				d, err := failoverRound(ctx, s, r)
				if err != nil {
					return err
				}
				logf("failover round %d %-8s %v", r+1, s.name(), d.Round(time.Millisecond))
				samples[s.name()] = append(samples[s.name()], d)
				rep.FailoverRaw[s.name()] = append(rep.FailoverRaw[s.name()], float64(d.Round(time.Millisecond))/1e6)
			}
		}
		for name, ds := range samples {
			rep.Failover[name] = summarize(ds, 0, 0, "ms")
		}
		p, e := rep.Failover["plugreg"], rep.Failover["etcd"]
		rep.FailoverRate = latencyRatio(p, e)
		if b, ok := rep.Failover["baseline"]; ok {
			r := latencyRatio(p, b)
			rep.FailoverBaseline = &r
		}
	}
	return nil
}

// measureCell runs one system's side of a cell: its clock (run), the CPU
// its servers and the load generator used per operation, and what its
// Raft log did, from the members' metrics read before and after, outside
// the CPU window. A failed scrape leaves st.Raft nil, logged: the cell's
// own figures still hold.
func measureCell(ctx context.Context, s system, run func() (stats, error)) (stats, error) {
	src := s.metrics()
	before, serr := scrapeMembers(ctx, src)
	leader, lerr := s.leader(ctx)
	cpu0, gen0 := clusterCPU(s), benchCPU()
	st, err := run()
	if err != nil {
		return st, err
	}
	if st.Ops > 0 {
		st.ServerCPUPerOp = ms(clusterCPU(s)-cpu0) / float64(st.Ops)
		st.ClientCPUPerOp = ms(benchCPU()-gen0) / float64(st.Ops)
	}
	after, aerr := scrapeMembers(ctx, src)
	leaderAfter, laerr := s.leader(ctx)
	if err := errors.Join(serr, lerr, aerr, laerr); err != nil {
		if ctx.Err() == nil {
			logf("%s: no Raft figures for this cell: %v", s.name(), err)
		}
		return st, nil
	}
	st.Raft = raftActivityOf(src, before, after, leader, leaderAfter, st.Writes)
	return st, nil
}

// raftLog is the log line's part for a; "" when there is none.
func raftLog(a *raftActivity) string {
	if a == nil {
		return ""
	}
	s := fmt.Sprintf("fsyncs leader %.0f all %.0f ops/fsync %.1f snapshots %.0f", a.LeaderFsyncs, a.MemberFsyncs, a.OpsPerLeaderFsync, a.Snapshots)
	if a.LeaderChanged {
		s += " (leader changed)"
	}
	return s
}

// runProfile runs a 64-client register cell against plugreg while taking a
// CPU profile of every member, then saves the leader's allocation profile;
// with -profile-workload watch, a watch cell while taking every member's.
func runProfile(ctx context.Context, o *options, s *plugregSystem) error {
	if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
		return fmt.Errorf("profile dir: %w", err)
	}
	if o.profileWorkload == "watch" {
		return runWatchProfile(ctx, o, s)
	}
	l, err := s.leader(ctx)
	if err != nil {
		return err
	}
	ws, err := newWriters(s, 64, 0)
	if err != nil {
		return err
	}
	defer ws.close()
	// Every member: two thirds of the writes arrive at a follower and
	// are forwarded, so a register's cost is not all on the leader.
	profiled := profileMembers(ctx, o, s, func(i int) string {
		if i == l {
			return "leader-cpu.pprof"
		}
		return fmt.Sprintf("follower%d-cpu.pprof", i)
	})
	st, _ := registerCell(ctx, s, ws, 64, time.Duration(o.profileSecs)*time.Second, "prof")
	logf("profiled register, 64 clients: %.0f writes/s p50 %.2fms p99 %.2fms errors %d", st.Throughput, st.P50, st.P99, st.Errors)
	if err := profiled(); err != nil {
		return err
	}
	base := "http://" + s.c.nodes[l].pprofAddr() + "/debug/pprof/"
	if err := fetch(ctx, base+"allocs", filepath.Join(o.profileDir, "leader-allocs.pprof")); err != nil {
		return err
	}
	logf("profiles in %s (go tool pprof -top %s/leader-cpu.pprof)", o.profileDir, o.profileDir)
	return nil
}

// runWatchProfile runs a watch cell (o.profileClients writers,
// o.watchers watchers spread over the members) while taking a CPU
// profile of every member: a delivery's cost falls on the member its
// watcher reads from, and the writes' on the leader.
func runWatchProfile(ctx context.Context, o *options, s *plugregSystem) error {
	ws, err := newWriters(s, o.profileClients, 0)
	if err != nil {
		return err
	}
	defer ws.close()
	profiled := profileMembers(ctx, o, s, func(i int) string { return fmt.Sprintf("member%d-watch-cpu.pprof", i) })
	st, cellErr := watchCell(ctx, s, ws, o.profileClients, o.watchers, time.Duration(o.profileSecs)*time.Second, "prof")
	fetchErr := profiled()
	if cellErr != nil {
		return cellErr
	}
	if fetchErr != nil {
		return fetchErr
	}
	logf("profiled watch, %d writers, %d watchers: %.0f deliveries/s p50 %.2fms p99 %.2fms errors %d missed %d",
		o.profileClients, o.watchers, st.Throughput, st.P50, st.P99, st.Errors, st.Missed)
	logf("profiles in %s (go tool pprof -top %s/member0-watch-cpu.pprof)", o.profileDir, o.profileDir)
	return nil
}

// profileMembers starts a CPU profile of every member of s over the
// -profile cell, into name(i) in -profile; the function it returns waits
// for every fetch (each ends within the profile's seconds, a failed cell
// or not) and returns the first error.
func profileMembers(ctx context.Context, o *options, s *plugregSystem, name func(i int) string) func() error {
	errCh := make(chan error, len(s.c.nodes))
	for i, n := range s.c.nodes {
		url := "http://" + n.pprofAddr() + "/debug/pprof/profile?seconds=" + strconv.Itoa(o.profileSecs-1)
		path := filepath.Join(o.profileDir, name(i))
		go func() { errCh <- fetch(ctx, url, path) }()
	}
	return func() error {
		var first error
		for range s.c.nodes {
			if err := <-errCh; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := io.Copy(fh, resp.Body); err != nil {
		fh.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return fh.Close()
}
