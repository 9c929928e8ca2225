package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plugreg/plugreg/client"
)

// The -fleet mode: a fleet simulator. Three real server processes
// (default flags: default log store, fsync, TCP on loopback) and N
// simulated hosts, each a real agent.Client and agent.Host (fleetchild.go),
// packed many per host process. What stands in for what:
//   - Gossip: the first -fleet-gossip-hosts hosts (spread over the host
//     processes) run real memberlist and find the servers through it; the
//     others are given the server list (agent.Config.StaticServers), since
//     10,000 memberlist instances do not fit a 2-core machine. The servers'
//     gossip never sees those hosts: suspect marks, failure detection and
//     reaping are measured on the gossiping hosts only, and a static host
//     never learns that a server died (it skips an unreachable one per
//     call).
//   - Plugins: no kubelet sockets; each host registers its 20 plugins
//     through its Host (what the kubelet watcher does once it has probed
//     a socket), with the source the watcher stamps, so anti-entropy keeps
//     them right.
//   - The host's upstream: one local subscriber per host on a signal type
//     (-fleet-signal-type) that the bench writes markers to, so that
//     "every upstream resumed" is timed as "every host received a write
//     made after the fault". The fleet's plugin changes are not on it: a
//     host's upstream is a subscription that the fleet's churn does not
//     match, which every write still has to consider.
//   - Watchers: event streams of the Go client in the bench process,
//     spread over the servers, filtered on the fleet's plugin types.

// Loopback addresses and ports of the fleet: the servers on 127.0.3.1-3
// (ports fleetBasePort+300.. as startPlugregAs lays them out), host
// process k on 127.0.3.(10+k) with its control API on fleetControlPort and
// its gossiping hosts on fleetGossipPort+j.
const (
	fleetBasePort    = 27000
	fleetGossipPort  = 27000
	fleetControlPort = 27999
	fleetMaxProcs    = 240
	fleetSignalName  = "marker"
)

func fleetServerIP(i int) string { return "127.0.3." + strconv.Itoa(i+1) }
func fleetProcIP(k int) string   { return "127.0.3." + strconv.Itoa(10+k) }

var allFleetScenarios = []string{"churn", "snapshot", "restart", "failover", "dark", "rolling", "storm"}

// fleetOptions are the -fleet-* flags.
type fleetOptions struct {
	sizes        []int
	perProc      int
	gossipHosts  int
	plugins      int
	watchers     int
	churnRate    float64
	churnFor     time.Duration
	settle       time.Duration
	idle         time.Duration
	timeout      time.Duration
	darkFor      time.Duration
	darkShare    float64
	signalType   string
	nice         int
	profileDir   string
	scenarios    map[string]bool
	hostsPerProc int // resolved
}

func (f *fleetOptions) total() int { return f.sizes[len(f.sizes)-1] }

// parseFleetFlags checks the -fleet-* flags (sizes is -fleet-hosts).
func (f *fleetOptions) resolve(sizes, scenarios string) error {
	f.sizes = nil
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || (len(f.sizes) > 0 && n <= f.sizes[len(f.sizes)-1]) {
			return fmt.Errorf("-fleet-hosts: %q: want increasing positive sizes, e.g. 100,1000,10000", sizes)
		}
		f.sizes = append(f.sizes, n)
	}
	f.scenarios = map[string]bool{}
	for _, s := range strings.Split(scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(allFleetScenarios, s) {
			return fmt.Errorf("-fleet-scenarios: unknown %q (known: %s)", s, strings.Join(allFleetScenarios, ", "))
		}
		f.scenarios[s] = true
	}
	if f.plugins < 1 || f.watchers < 0 || f.churnRate <= 0 || f.churnFor <= 0 || f.gossipHosts < 0 || f.perProc < 0 ||
		f.settle < 0 || f.idle <= 0 || f.timeout <= 0 || f.darkFor <= 0 || f.darkShare <= 0 || f.darkShare > 1 {
		return errors.New("-fleet-plugins, -fleet-churn-rate, -fleet-churn-duration, -fleet-idle, -fleet-timeout, -fleet-dark-duration (positive), -fleet-dark-share (0 to 1], -fleet-watchers, -fleet-gossip-hosts, -fleet-hosts-per-proc, -fleet-settle (0 or more): out of range")
	}
	f.hostsPerProc = f.perProc
	if f.hostsPerProc == 0 {
		// Ten processes at least (the dark scenario stops whole ones),
		// 500 hosts in one at most.
		f.hostsPerProc = min(500, max(10, (f.total()+9)/10))
	}
	if procs := (f.total() + f.hostsPerProc - 1) / f.hostsPerProc; procs > fleetMaxProcs {
		return fmt.Errorf("-fleet-hosts %d at %d per process needs %d host processes; at most %d (raise -fleet-hosts-per-proc)", f.total(), f.hostsPerProc, procs, fleetMaxProcs)
	}
	if f.nice < 0 || f.nice > 19 {
		return fmt.Errorf("-fleet-hosts-nice %d: want 0 to 19", f.nice)
	}
	if f.hostsPerProc > fleetControlPort-fleetGossipPort-1 {
		return fmt.Errorf("-fleet-hosts-per-proc %d: at most %d", f.hostsPerProc, fleetControlPort-fleetGossipPort-1)
	}
	return nil
}

// ---- the report ----

// fleetStep is one fleet size: its start, its rest, its churn.
type fleetStep struct {
	Hosts       int `json:"hosts"`
	Instances   int `json:"instances"`
	NewHosts    int `json:"new_hosts"`
	GossipHosts int `json:"gossip_hosts"`
	Procs       int `json:"host_processes"`

	// The start of the new hosts (all at once): processes spawned and
	// every host's Client running; then every instance listed on each
	// server (its event stream from index 0).
	SpawnSeconds       float64   `json:"start_spawn_s"`
	ListedSeconds      []float64 `json:"start_all_listed_per_server_s"`
	ListedEvery        float64   `json:"start_all_listed_every_server_s"`
	StartWriteP50Ms    float64   `json:"start_write_p50_ms"`
	StartWriteP99Ms    float64   `json:"start_write_p99_ms"`
	StartWrites        int       `json:"start_writes"`
	StartWriteErrors   int       `json:"start_write_errors"`
	StartLeaderCPUPerW float64   `json:"start_leader_cpu_ms_per_instance"`
	StartUpstreams     int       `json:"upstreams_open"`

	// At rest, after -fleet-settle, over -fleet-idle.
	HostIdleCPUMsPerSec   float64 `json:"host_idle_cpu_ms_per_s_each"`
	LeaderIdleCPUMsPerSec float64 `json:"leader_idle_cpu_ms_per_s"`
	HostRSSBytesEach      float64 `json:"host_rss_bytes_each"`
	HostProcRSSBytes      []int64 `json:"host_process_rss_bytes"`
	ServerRSSBytes        []int64 `json:"server_rss_bytes"`
	ServerRSSPerInstance  float64 `json:"server_rss_bytes_per_instance"`
	// The servers' live heap (after a GC) less the empty servers', per
	// instance: it holds the hosts' connections and subscriptions too.
	ServerHeapBytes       []int64 `json:"server_live_heap_bytes"`
	ServerHeapPerInstance float64 `json:"server_live_heap_bytes_per_instance"`
	AERounds              int     `json:"anti_entropy_rounds_so_far"`
	AEWrites              int     `json:"anti_entropy_corrections_so_far"`
	WatcherHeapBytesEach  float64 `json:"server_live_heap_bytes_per_watcher"`

	Churn *fleetChurn `json:"churn,omitempty"`
	// Storm: the leader was killed during this step's start (scenario
	// storm, at the last size).
	Storm *stormKill `json:"leader_killed_in_start,omitempty"`
}

// fleetChurn is a steady churn's figures.
type fleetChurn struct {
	Rate     float64 `json:"rate_per_s"`
	Seconds  float64 `json:"seconds"`
	Writes   int     `json:"writes"`
	Errors   int     `json:"errors"`
	Watchers int     `json:"watchers"`
	WriteP50 float64 `json:"write_p50_ms"`
	WriteP99 float64 `json:"write_p99_ms"`
	// Commit -> last watcher: from the earlier of the write's
	// acknowledgement and its first receipt by a watcher (both follow
	// its commit: a lower bound) to its receipt by the last of the
	// watchers; and from the write's start (an upper bound).
	AckToLastP50   float64 `json:"commit_to_last_watcher_p50_ms_lower_bound"`
	AckToLastP99   float64 `json:"commit_to_last_watcher_p99_ms_lower_bound"`
	AckToLastMax   float64 `json:"commit_to_last_watcher_max_ms_lower_bound"`
	StartToLastP99 float64 `json:"commit_to_last_watcher_p99_ms_upper_bound"`
	Undelivered    int     `json:"writes_not_at_every_watcher"`
	// Leader CPU over the churn per write, and the same less what the
	// leader used at rest over as long (the fleet's own background:
	// heartbeats, anti-entropy).
	LeaderCPUPerWrite         float64 `json:"leader_cpu_ms_per_write"`
	LeaderMarginalCPUPerWrite float64 `json:"leader_marginal_cpu_ms_per_write"`
}

type fleetReport struct {
	Hosts        int          `json:"hosts"`
	Plugins      int          `json:"plugins_per_host"`
	GossipHosts  int          `json:"gossip_hosts"`
	HostsPerProc int          `json:"hosts_per_process"`
	Watchers     int          `json:"watchers"`
	LoadAvgStart string       `json:"loadavg_start"`
	LoadAvgEnd   string       `json:"loadavg_end"`
	ServerRSS0   []int64      `json:"server_rss_empty_bytes"`
	ServerHeap0  []int64      `json:"server_live_heap_empty_bytes"`
	Steps        []*fleetStep `json:"steps"`

	WatcherHeapBytesEach float64 `json:"server_live_heap_bytes_per_watcher"`

	SnapshotBytes   int64   `json:"snapshot_bytes,omitempty"`
	SnapshotSeconds float64 `json:"snapshot_s,omitempty"`

	Restart  *fleetRecovery `json:"servers_restart,omitempty"`
	Failover *fleetRecovery `json:"failover,omitempty"`
	Dark     *fleetDark     `json:"dark,omitempty"`
	Rolling  *fleetRolling  `json:"rolling_restart,omitempty"`

	// Gossiping hosts a server's view showed other than alive after they
	// were first alive (false suspicions: the bench had not stopped them),
	// over the starts, rests and churns.
	FalseSuspicions int      `json:"false_suspicions"`
	Notes           []string `json:"notes,omitempty"`
}

// fleetRecovery is a fault of the servers and the fleet's way back.
type fleetRecovery struct {
	What string `json:"what"`
	// FirstWrite: to the first acknowledged write (failover).
	FirstWriteSeconds float64 `json:"first_write_s,omitempty"`
	// Ready: every server serves with a leader and has applied what it
	// had before (restart).
	ReadySeconds float64 `json:"all_ready_s,omitempty"`
	// Resumed: every host received a write made after the fault over its
	// upstream.
	ResumedSeconds float64 `json:"every_upstream_resumed_s"`
	HostResets     int     `json:"host_resets"`
	WatcherResets  int     `json:"watcher_resets"`
	Listed         []int   `json:"instances_listed_per_server"`
}

type fleetDark struct {
	Hosts           int         `json:"hosts"`
	GossipHosts     int         `json:"gossip_hosts"`
	Seconds         float64     `json:"seconds"`
	MarkedNotAlive  int         `json:"gossip_hosts_marked_not_alive"`
	Churn           *fleetChurn `json:"churn_while_dark"`
	ResumedSeconds  float64     `json:"dark_upstreams_resumed_after_continue_s"`
	AliveSeconds    float64     `json:"dark_gossip_hosts_alive_again_s"`
	InstancesListed []int       `json:"instances_listed_per_server"`
	// RelistedSeconds: from SIGCONT until every server lists every
	// instance again (the leader reaps a gossiping host dead longer than
	// -node-reap-after; its anti-entropy registers them again).
	RelistedSeconds float64 `json:"all_listed_again_after_continue_s"`
}

// ---- the run ----

type fleetProc struct {
	k    int
	spec fleetChildSpec
	proc *proc
	url  string
}

type fleetBench struct {
	o      *options
	f      *fleetOptions
	pc     *plugregCluster
	sys    *plugregSystem
	bin    string
	dir    string
	rep    *fleetReport
	hc     *http.Client
	procs  []*fleetProc
	track  []*fleetTracker
	watch  *fleetWatchers
	marker *client.Client
	markTr *http.Transport
	seq    int
	memb   *memberLog
}

func runFleet(ctx context.Context, o *options, bin, dir string) (rep *fleetReport, err error) {
	f := o.fleet
	rep = &fleetReport{Hosts: f.total(), Plugins: f.plugins, HostsPerProc: f.hostsPerProc, Watchers: f.watchers, LoadAvgStart: loadAvg()}
	flags := append([]string{"-log-level", "info"}, o.plugregFlags...)
	logf("fleet: starting plugreg (3 servers on 127.0.3.1-3) in %s", dir)
	pc, err := startPlugregOn(fleetServerIP, "plugreg", fleetBasePort, bin, dir, flags, nil)
	b := &fleetBench{o: o, f: f, pc: pc, sys: &plugregSystem{c: pc}, bin: bin, dir: filepath.Join(dir, "fleet"), rep: rep,
		hc: &http.Client{Timeout: 5 * time.Minute}}
	// Hosts first, then the servers, also on error and Ctrl-C.
	defer pc.stop()
	defer b.stopProcs()
	if err != nil {
		return rep, err
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return rep, fmt.Errorf("fleet dir: %w", err)
	}
	if err := pc.waitReady(ctx, 60*time.Second); err != nil {
		return rep, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if b.marker, b.markTr, err = b.sys.newClient(pc.httpAddrs()); err != nil {
		return rep, err
	}
	defer b.markTr.CloseIdleConnections()
	for _, nd := range pc.nodes {
		t, err := b.startTracker(ctx, nd, &wg)
		if err != nil {
			return rep, err
		}
		b.track = append(b.track, t)
	}
	// Any live server's gossip view: one of them is killed and restarted.
	memb, mtr, err := startMemberLog(ctx, b.sys, pc.httpAddrs(), &wg)
	if err != nil {
		return rep, err
	}
	defer mtr.CloseIdleConnections()
	b.memb = memb
	time.Sleep(2 * time.Second) // the servers' RSS at rest, empty
	for i := 0; i < members; i++ {
		rss, _ := procStatus(b.sys.pid(i), "VmRSS:")
		rep.ServerRSS0 = append(rep.ServerRSS0, rss)
		heap, err := b.liveHeap(ctx, i)
		if err != nil {
			return rep, err
		}
		rep.ServerHeap0 = append(rep.ServerHeap0, heap)
	}

	defer b.stopWatchers()
	for _, size := range f.sizes {
		b.stopWatchers()
		st, err := b.growTo(ctx, size)
		if err != nil {
			return rep, err
		}
		rep.Steps = append(rep.Steps, st)
		rep.GossipHosts = st.GossipHosts
		if err := b.rest(ctx, st); err != nil {
			return rep, err
		}
		if f.scenarios["churn"] {
			if f.watchers > 0 {
				if st.WatcherHeapBytesEach, err = b.startWatchers(ctx); err != nil {
					return rep, err
				}
				rep.WatcherHeapBytesEach = st.WatcherHeapBytesEach
			}
			if st.Churn, err = b.churn(ctx, f.churnFor); err != nil {
				return rep, err
			}
			st.Churn.LeaderMarginalCPUPerWrite = st.Churn.LeaderCPUPerWrite - st.LeaderIdleCPUMsPerSec*st.Churn.Seconds/float64(max(1, st.Churn.Writes))
		}
	}
	// Before the servers' restarts: a restarted server's gossip view is
	// rebuilt, and its members' statuses pass through states no host
	// caused.
	rep.FalseSuspicions = b.falseSuspicions()
	if f.scenarios["snapshot"] {
		if err := b.snapshot(ctx); err != nil {
			return rep, err
		}
	}
	if f.scenarios["restart"] {
		if rep.Restart, err = b.restartServers(ctx); err != nil {
			return rep, err
		}
	}
	if f.scenarios["failover"] {
		if rep.Failover, err = b.failover(ctx); err != nil {
			return rep, err
		}
	}
	if f.scenarios["dark"] {
		if rep.Dark, err = b.darkHosts(ctx); err != nil {
			return rep, err
		}
	}
	if f.scenarios["rolling"] {
		if rep.Rolling, err = b.rollingRestart(ctx); err != nil {
			return rep, err
		}
	}
	rep.LoadAvgEnd = loadAvg()
	return rep, nil
}

// ---- host processes ----

// growTo starts host processes until the fleet has size hosts, all at
// once, and times until every server lists every instance.
func (b *fleetBench) growTo(ctx context.Context, size int) (*fleetStep, error) {
	f := b.f
	from := 0
	for _, p := range b.procs {
		from = max(from, p.spec.From+p.spec.Count)
	}
	st := &fleetStep{Hosts: size, Instances: size * f.plugins, NewHosts: size - from}
	totalProcs := (f.total() + f.hostsPerProc - 1) / f.hostsPerProc
	gossipPerProc := (f.gossipHosts + totalProcs - 1) / totalProcs
	var servers, joins []string
	for _, nd := range b.pc.nodes {
		servers = append(servers, nd.raftAddr())
		joins = append(joins, fmtAddr(nd.ip, nd.gossipPort))
	}
	logf("fleet: starting hosts %d..%d (%d instances in all)", from, size-1, st.Instances)
	l, err := b.leader(ctx)
	if err != nil {
		return nil, err
	}
	cpu0, _ := cpuTime(b.sys.pid(l))
	t0 := time.Now()
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fleet: the bench's own path, to start host processes: %w", err)
	}
	// The hosts run niced (nice(1) execs the bench in the same process):
	// on a real fleet their CPU is their own machines', not the servers'.
	nicePath, niceArgs := "nice", []string{"-n", strconv.Itoa(f.nice)}
	var started []*fleetProc
	for h := from; h < size; {
		k := len(b.procs)
		n := min(f.hostsPerProc, size-h)
		g := min(n, gossipPerProc, max(0, f.gossipHosts-b.gossipCount()))
		spec := fleetChildSpec{Dir: filepath.Join(b.dir, fmt.Sprintf("p%03d", k)), IP: fleetProcIP(k), Control: fmtAddr(fleetProcIP(k), fleetControlPort),
			From: h, Count: n, Gossip: g, GossipPort: fleetGossipPort, Join: joins, Servers: servers, Plugins: f.plugins, SignalType: f.signalType, Fleet: size}
		js, _ := json.Marshal(spec)
		p := &fleetProc{k: k, spec: spec, url: "http://" + spec.Control,
			proc: &proc{name: fmt.Sprintf("hosts-%03d", k), path: nicePath, args: append(niceArgs, self, "-fleet-hosts-child", string(js)),
				logPath: filepath.Join(b.dir, fmt.Sprintf("hosts-%03d.log", k)), env: []string{"GOMAXPROCS=1"}}}
		if err := p.proc.start(); err != nil {
			return nil, err
		}
		b.procs = append(b.procs, p)
		started = append(started, p)
		h += n
	}
	st.Procs, st.GossipHosts = len(b.procs), b.gossipCount()
	deadline := t0.Add(f.timeout)
	if f.scenarios["storm"] && size == f.total() {
		st.Storm = b.startStormKill(ctx, t0, from*f.plugins, size*f.plugins)
	}
	for _, p := range started {
		if err := b.waitChild(ctx, p, deadline, func(s fleetChildState) bool { return s.Started+s.Failed == p.spec.Count }); err != nil {
			return nil, err
		}
	}
	st.SpawnSeconds = time.Since(t0).Seconds()
	want := size * f.plugins
	for _, t := range b.track {
		at, err := t.waitCount(ctx, want, deadline)
		if err != nil {
			listed, lerr := b.listedPerServer(ctx)
			return nil, fmt.Errorf("%w (the servers' own lists: %v %v)", err, listed, lerr)
		}
		st.ListedSeconds = append(st.ListedSeconds, at.Sub(t0).Seconds())
	}
	st.ListedEvery = slices.Max(st.ListedSeconds)
	if k := st.Storm; k != nil {
		<-k.done
		if k.err != nil {
			return nil, fmt.Errorf("fleet: the leader's kill in the start storm: %w", k.err)
		}
		if err := b.pc.waitReady(ctx, 120*time.Second); err != nil {
			return nil, err
		}
	}
	cpu1, _ := cpuTime(b.sys.pid(l))
	st.StartLeaderCPUPerW = ms(cpu1-cpu0) / float64(max(1, st.NewHosts*f.plugins))
	if st.Storm != nil {
		st.StartLeaderCPUPerW = 0 // the killed leader's, then its restart's: not the leader's
	}
	var lat []float64
	for _, p := range started {
		if err := b.waitChild(ctx, p, deadline, func(s fleetChildState) bool { return s.Announced+s.Failed == p.spec.Count }); err != nil {
			return nil, err
		}
		s, err := b.childState(ctx, p, true)
		if err != nil {
			return nil, err
		}
		if s.Failed > 0 {
			return nil, fmt.Errorf("fleet: %d hosts of %s did not start (its log: %s)", s.Failed, p.proc.name, p.proc.logPath)
		}
		lat = append(lat, s.PutMs...)
		st.StartWriteErrors += s.PutErrors
	}
	st.StartWrites = len(lat)
	st.StartWriteP50Ms, st.StartWriteP99Ms = quantile(lat, 0.5), quantile(lat, 0.99)
	logf("fleet: %d hosts: processes and clients up after %.2fs; %d instances listed on every server after %.2fs (per server %v); start writes p50 %.1fms p99 %.1fms, %d errors (anti-entropy retried them); leader CPU %.3f ms per instance",
		size, st.SpawnSeconds, want, st.ListedEvery, st.ListedSeconds, st.StartWriteP50Ms, st.StartWriteP99Ms, st.StartWriteErrors, st.StartLeaderCPUPerW)
	return st, nil
}

func (b *fleetBench) gossipCount() int {
	n := 0
	for _, p := range b.procs {
		n += p.spec.Gossip
	}
	return n
}

func (b *fleetBench) childState(ctx context.Context, p *fleetProc, drain bool) (fleetChildState, error) {
	var s fleetChildState
	u := p.url + "/state"
	if drain {
		u += "?drain=1"
	}
	err := b.getJSON(ctx, u, &s)
	return s, err
}

func (b *fleetBench) getJSON(ctx context.Context, url string, v any) error {
	return b.doJSON(ctx, http.MethodGet, url, v)
}

func (b *fleetBench) doJSON(ctx context.Context, method, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s %s", method, url, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s %s: decode: %w", method, url, err)
	}
	return nil
}

// waitChild polls a host process's state until cond holds.
func (b *fleetBench) waitChild(ctx context.Context, p *fleetProc, deadline time.Time, cond func(fleetChildState) bool) error {
	var last error
	for time.Now().Before(deadline) {
		if !p.proc.running() {
			return fmt.Errorf("fleet: %s exited (its log: %s)", p.proc.name, p.proc.logPath)
		}
		s, err := b.childState(ctx, p, false)
		if err == nil && cond(s) {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("fleet: %s: timed out (last error: %v)", p.proc.name, last)
}

func (b *fleetBench) stopProcs() {
	var wg sync.WaitGroup
	for _, p := range b.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.proc.stop(20 * time.Second)
		}()
	}
	wg.Wait()
}

func (b *fleetBench) hostProcsCPU() time.Duration {
	var sum time.Duration
	for _, p := range b.procs {
		if d, err := cpuTime(p.proc.pid()); err == nil {
			sum += d
		}
	}
	return sum
}

// rest lets the fleet settle and measures it at rest: the hosts' CPU and
// memory, the leader's CPU, the servers' memory.
func (b *fleetBench) rest(ctx context.Context, st *fleetStep) error {
	if err := sleepCtx(ctx, b.f.settle); err != nil {
		return err
	}
	l, err := b.leader(ctx)
	if err != nil {
		return err
	}
	h0, l0 := b.hostProcsCPU(), mustCPU(b.sys.pid(l))
	t0 := time.Now()
	prof := b.profileLeader(ctx, l, b.f.idle, fmt.Sprintf("leader-rest-%d-hosts.pprof", st.Hosts))
	// The first host process: its hosts gossip, where the rest's do not.
	hostProf := b.profile(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", b.procs[0].url, max(1, int(b.f.idle.Seconds()))),
		fmt.Sprintf("hosts-000-rest-%d-hosts.pprof", st.Hosts))
	if err := sleepCtx(ctx, b.f.idle); err != nil {
		return err
	}
	if err := errors.Join(prof(), hostProf()); err != nil {
		return err
	}
	// What the leader's heap holds per host: its connections, streams
	// and registrations.
	if err := b.profile(ctx, "http://"+b.pc.nodes[l].pprofAddr()+"/debug/pprof/heap?gc=1", fmt.Sprintf("leader-heap-rest-%d-hosts.pprof", st.Hosts))(); err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	st.HostIdleCPUMsPerSec = ms(b.hostProcsCPU()-h0) / el / float64(st.Hosts)
	st.LeaderIdleCPUMsPerSec = ms(mustCPU(b.sys.pid(l))-l0) / el
	var sum int64
	for _, p := range b.procs {
		rss, _ := procStatus(p.proc.pid(), "VmRSS:")
		st.HostProcRSSBytes = append(st.HostProcRSSBytes, rss)
		sum += rss
	}
	st.HostRSSBytesEach = float64(sum) / float64(st.Hosts)
	var per float64
	for i := 0; i < members; i++ {
		rss, _ := procStatus(b.sys.pid(i), "VmRSS:")
		st.ServerRSSBytes = append(st.ServerRSSBytes, rss)
		per += float64(rss-b.rep.ServerRSS0[i]) / float64(st.Instances) / members
	}
	st.ServerRSSPerInstance = per
	per = 0
	for i := 0; i < members; i++ {
		heap, err := b.liveHeap(ctx, i)
		if err != nil {
			return err
		}
		st.ServerHeapBytes = append(st.ServerHeapBytes, heap)
		per += float64(heap-b.rep.ServerHeap0[i]) / float64(st.Instances) / members
	}
	st.ServerHeapPerInstance = per
	for _, p := range b.procs {
		s, err := b.childState(ctx, p, false)
		if err != nil {
			return err
		}
		st.StartUpstreams += s.Upstreams
		st.AERounds += s.AERounds
		st.AEWrites += s.AEWrites
	}
	logf("fleet: %d hosts at rest: %.3f ms/s CPU per host, %.0f KiB RSS per host; leader %.1f ms/s; servers %.0f B RSS per instance; %d upstreams open",
		st.Hosts, st.HostIdleCPUMsPerSec, st.HostRSSBytesEach/1024, st.LeaderIdleCPUMsPerSec, st.ServerRSSPerInstance, st.StartUpstreams)
	return nil
}

// profileLeader takes a CPU profile of the leader over d into name in
// -fleet-profile, if set; the function it returns waits for it.
func (b *fleetBench) profileLeader(ctx context.Context, l int, d time.Duration, name string) func() error {
	return b.profile(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.pc.nodes[l].pprofAddr(), max(1, int(d.Seconds()))), name)
}

// profile fetches the profile at u into name in -fleet-profile, if set,
// in the background; the function it returns waits for it.
func (b *fleetBench) profile(ctx context.Context, u, name string) func() error {
	if b.f.profileDir == "" {
		return func() error { return nil }
	}
	if err := os.MkdirAll(b.f.profileDir, 0o755); err != nil {
		return func() error { return fmt.Errorf("-fleet-profile: %w", err) }
	}
	done := make(chan error, 1)
	go func() { done <- fetch(ctx, u, filepath.Join(b.f.profileDir, name)) }()
	return func() error { return <-done }
}

func mustCPU(pid int) time.Duration {
	d, _ := cpuTime(pid)
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// quantile is the nearest-rank p-quantile of v, in v's unit; 0 when empty
// (JSON has no NaN).
func quantile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// leader is the index of the leader, asked again for up to 30 s: on a
// loaded machine one status call may time out.
func (b *fleetBench) leader(ctx context.Context) (int, error) {
	var l int
	var err error
	if !waitFor(ctx, 30*time.Second, func() bool { l, err = b.pc.leader(ctx); return err == nil }) {
		return -1, fmt.Errorf("fleet: %w", err)
	}
	return l, nil
}

// liveHeap is server i's live heap: a GC first (pprof's heap?gc=1), then
// its heap in use from its metrics.
func (b *fleetBench) liveHeap(ctx context.Context, i int) (int64, error) {
	nd := b.pc.nodes[i]
	var v map[string]float64
	var err error
	ok := waitFor(ctx, 30*time.Second, func() bool {
		if err = fetch(ctx, "http://"+nd.pprofAddr()+"/debug/pprof/heap?gc=1", os.DevNull); err != nil {
			return false
		}
		v, err = scrapeSamples(ctx, b.pc.hc, b.pc.url(nd)+"/v1/metrics", []string{"go_memstats_heap_alloc_bytes"})
		return err == nil
	})
	if !ok {
		return 0, fmt.Errorf("fleet: live heap of %s: %w", nd.id, err)
	}
	return int64(v["go_memstats_heap_alloc_bytes"]), nil
}
