package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/internal/kubeletplugin"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The -agents mode: many client agents (real `plugreg agent -client`
// processes, each on its own loopback address) discover kubelet-protocol
// plugins that the bench serves in their plugins dirs, against the three
// server processes. plugreg only: etcd has no agent to compare with.

// agentPorts: every client agent listens on the same ports of its own IP.
const (
	agentHTTPPort   = 28500
	agentGossipPort = 28401
	agentPprofPort  = 28601
	agentPrefix     = "agent-"
)

// agentIP is client agent i's loopback address: 127.0.1.1, 127.0.1.2, ...
// 127.0.1.250, 127.0.2.1, ... (the servers are on 127.0.0.1-3).
func agentIP(i int) string {
	return fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
}

func agentName(i int) string { return fmt.Sprintf("%s%03d", agentPrefix, i) }

// agentsReport is the -agents mode's figures. Times are seconds from the
// start of their phase.
type agentsReport struct {
	Agents          int    `json:"agents"`
	SocketsPerAgent int    `json:"sockets_per_agent"`
	Instances       int    `json:"instances"`
	Killed          int    `json:"killed"`
	NodeReapAfter   string `json:"node_reap_after"`
	AgentKind       string `json:"agent_kind"`
	LoadAvgStart    string `json:"loadavg_start"`
	LoadAvgEnd      string `json:"loadavg_end"`

	// (a) start: sockets created and processes started, then the first
	// time every agent was alive in the leader's gossip view, all
	// instances were in the leader's event stream, in every server's, and
	// every plugin had been told it is registered.
	GoMaxProcs           int       `json:"agent_gomaxprocs"`
	StartInterval        string    `json:"agent_start_interval"`
	StartSocketsSeconds  float64   `json:"start_sockets_s"`
	StartSpawnSeconds    float64   `json:"start_spawn_s"`
	StartAllAliveSeconds float64   `json:"start_all_alive_on_leader_s"`
	StartListedSeconds   []float64 `json:"start_all_listed_per_server_s"`
	StartListedEvery     float64   `json:"start_all_listed_every_server_s"`
	StartNotifiedSeconds float64   `json:"start_all_plugins_notified_s"`
	StartNotifiedP50     float64   `json:"start_plugin_notified_p50_s"`
	// CPU time the start cost: each agent process (all it used from exec
	// to the last plugin told), and each server over the same span.
	StartCPUPerAgentMs float64 `json:"start_cpu_ms_per_agent"`
	StartServerCPUMs   float64 `json:"start_cpu_ms_per_server"`
	// Share of the machine's CPU (all cores) that processes other than
	// the bench's own used during the start phase and the settle phase:
	// this is a shared machine.
	StartOthersCPUShare  float64 `json:"start_others_cpu_share"`
	SettleOthersCPUShare float64 `json:"settle_others_cpu_share"`

	// (b) memory of the agent processes after settling, and CPU at rest.
	SettleSeconds       float64 `json:"settle_s"`
	AgentRSSBytes       []int64 `json:"agent_rss_bytes"`
	AgentRSSMedian      int64   `json:"agent_rss_median_bytes"`
	AgentRSSMax         int64   `json:"agent_rss_max_bytes"`
	AgentHWMMax         int64   `json:"agent_peak_rss_max_bytes"`
	AgentIdleCPUPerSec  float64 `json:"agent_idle_cpu_ms_per_s_each"`
	ServerIdleCPUPerSec float64 `json:"server_idle_cpu_ms_per_s_each"`
	ServerRSSBytes      []int64 `json:"server_rss_bytes"`
	BenchRSSBytes       int64   `json:"bench_process_rss_bytes"`

	// (c) kill -9 of Killed agents: per killed node, when the leader's
	// gossip marked it failed and when its last instance left the leader's
	// stream; then when every server had none of theirs.
	KilledNodes        []string  `json:"killed_nodes,omitempty"`
	KillDetectP50      float64   `json:"kill_detect_failed_p50_s"`
	KillDetectMax      float64   `json:"kill_detect_failed_max_s"`
	KillReapP50        float64   `json:"kill_failed_to_reaped_p50_s"`
	KillReapMax        float64   `json:"kill_failed_to_reaped_max_s"`
	KillGoneLeader     float64   `json:"kill_all_gone_on_leader_s"`
	KillGoneSeconds    []float64 `json:"kill_all_gone_per_server_s"`
	KillGoneEvery      float64   `json:"kill_all_gone_every_server_s"`
	SurvivorDeregs     int       `json:"survivor_deregistered_events"`
	SurvivorsListed    int       `json:"survivor_instances_listed_min"`
	KillReapLogEntries int       `json:"kill_reap_raft_entries"`

	// (d) restart of the killed agents: back on every server, and every
	// one of their plugins told again.
	RestartListedSeconds  []float64 `json:"restart_all_listed_per_server_s,omitempty"`
	RestartListedEvery    float64   `json:"restart_all_listed_every_server_s"`
	RestartNotifiedSecond float64   `json:"restart_all_plugins_notified_s"`

	Notes []string `json:"notes,omitempty"`
}

// ---- the plugins the bench serves ----

// benchPlugin is one kubelet-protocol plugin socket in an agent's plugins
// dir, with the times the agent told it it was registered.
type benchPlugin struct {
	agent int
	p     *kubeletplugin.Plugin

	mu       sync.Mutex
	notes    []time.Time // NotifyRegistrationStatus(true)
	refusals []string
}

func (b *benchPlugin) onStatus(s *registerapi.RegistrationStatus) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.PluginRegistered {
		b.notes = append(b.notes, now)
	} else {
		b.refusals = append(b.refusals, s.Error)
	}
}

// notifiedAfter is the first registered notification at or after t0.
func (b *benchPlugin) notifiedAfter(t0 time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.notes {
		if !t.Before(t0) {
			return t, true
		}
	}
	return time.Time{}, false
}

// pluginInfo is socket k's GetInfo answer: a mix of CSI node plugins, DRA
// plugins and a generic type, each name on every agent (as a CSI driver
// runs on every node), so a name's recency list holds one instance per
// agent.
func pluginInfo(k int) *registerapi.PluginInfo {
	switch k % 3 {
	case 0:
		return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: fmt.Sprintf("csi-%d.bench.plugreg.io", k), SupportedVersions: []string{"1.0.0"}}
	case 1:
		return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: fmt.Sprintf("dra-%d.bench.plugreg.io", k), SupportedVersions: []string{"v1.DRAPlugin"}}
	}
	return &registerapi.PluginInfo{Type: "bench-generic", Name: fmt.Sprintf("gen-%d", k), SupportedVersions: []string{"2.1"}}
}

func pluginTypes(sockets int) []string {
	seen := map[string]bool{}
	var out []string
	for k := 0; k < sockets; k++ {
		if t := pluginInfo(k).Type; !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// ---- what each server's event stream says ----

type instKey struct{ typ, name, alloc string }

// instTracker follows one server's event stream from index 0 and keeps
// the instances of client agents it has, by node. Conditions are checked
// on every event, so their times are when the event reached the bench.
type instTracker struct {
	server string

	mu     sync.Mutex // guards everything below
	byNode map[string]map[instKey]bool
	total  int
	deregs map[string]int // deregistered events per agent node
	conds  []*trackCond
}

type trackCond struct {
	pred func(*instTracker) bool
	at   time.Time
	done chan struct{}
}

func newInstTracker(server string) *instTracker {
	return &instTracker{server: server, byNode: map[string]map[instKey]bool{}, deregs: map[string]int{}}
}

func (t *instTracker) countLocked(node string) int { return len(t.byNode[node]) }

func (t *instTracker) addLocked(p *api.PluginInfo) {
	if p == nil || !strings.HasPrefix(p.NodeID, agentPrefix) {
		return
	}
	m := t.byNode[p.NodeID]
	if m == nil {
		m = map[instKey]bool{}
		t.byNode[p.NodeID] = m
	}
	k := instKey{p.Type, p.Name, p.AllocID}
	if !m[k] {
		m[k] = true
		t.total++
	}
}

func (t *instTracker) removeLocked(p *api.PluginInfo) {
	if p == nil || !strings.HasPrefix(p.NodeID, agentPrefix) {
		return
	}
	k := instKey{p.Type, p.Name, p.AllocID}
	if t.byNode[p.NodeID][k] {
		delete(t.byNode[p.NodeID], k)
		t.total--
	}
	t.deregs[p.NodeID]++
}

func (t *instTracker) apply(ev *api.Event) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.EventType {
	case "registered", "updated":
		t.addLocked(ev.Info)
	case "deregistered":
		t.removeLocked(ev.Info)
	case "reset":
		t.byNode, t.total = map[string]map[instKey]bool{}, 0
		for _, p := range ev.Plugins {
			t.addLocked(p)
		}
	default:
		return
	}
	t.checkLocked(now)
}

func (t *instTracker) checkLocked(now time.Time) {
	kept := t.conds[:0]
	for _, c := range t.conds {
		if c.pred(t) {
			c.at = now
			close(c.done)
			continue
		}
		kept = append(kept, c)
	}
	t.conds = kept
}

// when returns a condition that completes the first time pred holds
// (checked now, and after every later event).
func (t *instTracker) when(pred func(*instTracker) bool) *trackCond {
	c := &trackCond{pred: pred, done: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conds = append(t.conds, c)
	t.checkLocked(time.Now())
	return c
}

func (t *instTracker) deregsOf(nodes map[string]bool, want bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for node, d := range t.deregs {
		if nodes[node] == want {
			n += d
		}
	}
	return n
}

// wait waits for c, ctx or the deadline.
func (c *trackCond) wait(ctx context.Context, deadline time.Time, what string) (time.Time, error) {
	select {
	case <-c.done:
		return c.at, nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(time.Until(deadline)):
		return time.Time{}, fmt.Errorf("agents: timed out waiting for %s", what)
	}
}

// ---- the leader's gossip view ----

// memberLog polls one server's /v1/members and records, per member, the
// times its status changed (as seen by the poll, every 100 ms).
type memberLog struct {
	mu    sync.Mutex
	trans map[string][]memberTrans
	last  map[string]string
}

type memberTrans struct {
	status string
	at     time.Time
}

// startMemberLog polls the members through the servers at urls until ctx
// ends, in a goroutine wg waits for; close the returned transport's idle
// connections when done.
func startMemberLog(ctx context.Context, sys *plugregSystem, urls []string, wg *sync.WaitGroup) (*memberLog, interface{ CloseIdleConnections() }, error) {
	cli, tr, err := sys.newClient(urls)
	if err != nil {
		return nil, nil, err
	}
	m := &memberLog{trans: map[string][]memberTrans{}, last: map[string]string{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.run(ctx, cli)
	}()
	return m, tr, nil
}

func (m *memberLog) run(ctx context.Context, cli *client.Client) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ms, err := cli.Members(qctx)
		cancel()
		now := time.Now()
		if err == nil {
			m.mu.Lock()
			for _, mem := range ms {
				if m.last[mem.Name] != mem.Status {
					m.last[mem.Name] = mem.Status
					m.trans[mem.Name] = append(m.trans[mem.Name], memberTrans{mem.Status, now})
				}
			}
			m.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// firstAfter is when name was first seen with status at or after t0.
func (m *memberLog) firstAfter(name, status string, t0 time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, tr := range m.trans[name] {
		if tr.status == status && !tr.at.Before(t0) {
			return tr.at, true
		}
	}
	return time.Time{}, false
}

// ---- the run ----

type agentBench struct {
	o       *options
	pc      *plugregCluster
	sys     *plugregSystem
	dir     string
	bin     string
	procs   []*proc
	plugins []*benchPlugin
	track   []*instTracker
	members *memberLog
	leader  int
	rep     *agentsReport
}

func runAgents(ctx context.Context, o *options, pc *plugregCluster, bin, dir string) (rep *agentsReport, err error) {
	n, s := o.agents, o.agentSockets
	rep = &agentsReport{Agents: n, SocketsPerAgent: s, Instances: n * s, Killed: o.agentKill,
		NodeReapAfter: o.agentReapAfter.String(), AgentKind: "process (plugreg agent -client)", LoadAvgStart: loadAvg(),
		GoMaxProcs: o.agentProcs, StartInterval: o.agentInterval.String()}
	b := &agentBench{o: o, pc: pc, sys: &plugregSystem{c: pc}, dir: filepath.Join(dir, "agents"), bin: bin, rep: rep}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return rep, fmt.Errorf("agents dir: %w", err)
	}
	// Stop the agents before the plugins (their sockets), both before the
	// servers and the temp dir go (run's defer), also on error and Ctrl-C.
	defer b.stopAll()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	types := pluginTypes(s)
	for _, nd := range pc.nodes {
		cli, tr, cerr := b.sys.newClient([]string{b.sys.c.url(nd)})
		if cerr != nil {
			return rep, cerr
		}
		defer tr.CloseIdleConnections()
		t := newInstTracker(nd.id)
		b.track = append(b.track, t)
		ch := cli.Stream(ctx, 0, client.WatchOptions{Types: types}).Events()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range ch {
				t.apply(ev)
			}
		}()
	}
	if b.leader, err = pc.leader(ctx); err != nil {
		return rep, err
	}
	var mtr interface{ CloseIdleConnections() }
	if b.members, mtr, err = startMemberLog(ctx, b.sys, []string{pc.url(pc.nodes[b.leader])}, &wg); err != nil {
		return rep, err
	}
	defer mtr.CloseIdleConnections()

	if err := b.phaseStart(ctx); err != nil {
		return rep, err
	}
	if err := b.phaseSettle(ctx); err != nil {
		return rep, err
	}
	if o.agentKill > 0 {
		if err := b.phaseKill(ctx); err != nil {
			return rep, err
		}
		if o.agentRestart {
			if err := b.phaseRestart(ctx); err != nil {
				return rep, err
			}
		}
	}
	rep.LoadAvgEnd = loadAvg()
	return rep, nil
}

func (b *agentBench) agentDir(i int) string { return filepath.Join(b.dir, agentName(i)) }

// phaseStart creates every plugin socket, starts every agent process and
// times until all instances are on every server and every plugin was told.
func (b *agentBench) phaseStart(ctx context.Context) error {
	n, s, rep := b.o.agents, b.o.agentSockets, b.rep
	total := n * s
	joins := []string{}
	for _, nd := range b.pc.nodes {
		joins = append(joins, "-join", fmtAddr(nd.ip, nd.gossipPort))
	}
	logf("agents: starting %d client agents with %d plugin sockets each (%d instances)", n, s, total)
	serverCPU0 := clusterCPU(b.sys)
	others := b.othersCPU()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		pdir := filepath.Join(b.agentDir(i), "plugins")
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return fmt.Errorf("plugins dir: %w", err)
		}
		for k := 0; k < s; k++ {
			path := filepath.Join(pdir, fmt.Sprintf("plugin-%02d.sock", k))
			if len(path) >= 108 {
				return fmt.Errorf("socket path %s is too long for a unix socket; use a shorter -dir", path)
			}
			bp := &benchPlugin{agent: i}
			p, err := kubeletplugin.Start(path, pluginInfo(k), bp.onStatus)
			if err != nil {
				return err
			}
			bp.p = p
			b.plugins = append(b.plugins, bp)
		}
		args := []string{"agent", "-client", "-node", agentName(i), "-data-dir", filepath.Join(b.agentDir(i), "data"),
			"-bind", agentIP(i), "-http-port", strconv.Itoa(agentHTTPPort), "-gossip-port", strconv.Itoa(agentGossipPort),
			"-plugins-dir", pdir, "-retry-join", "-log-level", "warn"}
		args = append(args, joins...)
		if b.o.agentProfile != "" {
			args = append(args, "-pprof", fmtAddr(agentIP(i), agentPprofPort))
		}
		p := &proc{name: agentName(i), path: b.bin, args: args, logPath: filepath.Join(b.agentDir(i), "agent.log")}
		if b.o.agentProcs > 0 {
			p.env = []string{"GOMAXPROCS=" + strconv.Itoa(b.o.agentProcs)}
		}
		b.procs = append(b.procs, p)
	}
	rep.StartSocketsSeconds = time.Since(t0).Seconds()
	for k, p := range b.procs {
		if k > 0 && b.o.agentInterval > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(b.o.agentInterval):
			}
		}
		if err := p.start(); err != nil {
			return err
		}
	}
	rep.StartSpawnSeconds = time.Since(t0).Seconds()
	deadline := t0.Add(b.o.agentTimeout)

	// Every agent alive in the leader's gossip view.
	names := make([]string, n)
	for i := range names {
		names[i] = agentName(i)
	}
	if ok := waitFor(ctx, time.Until(deadline), func() bool {
		for _, nm := range names {
			if _, ok := b.members.firstAfter(nm, "alive", t0); !ok {
				return false
			}
		}
		return true
	}); !ok {
		return errors.Join(ctx.Err(), errors.New("agents: not every agent alive in the leader's gossip view in time"))
	}
	var lastAlive time.Time
	for _, nm := range names {
		at, _ := b.members.firstAfter(nm, "alive", t0)
		lastAlive = maxTime(lastAlive, at)
	}
	rep.StartAllAliveSeconds = lastAlive.Sub(t0).Seconds()

	all := func(t *instTracker) bool { return t.total == total }
	for _, t := range b.track {
		at, err := t.when(all).wait(ctx, deadline, fmt.Sprintf("all %d instances on %s", total, t.server))
		if err != nil {
			return err
		}
		rep.StartListedSeconds = append(rep.StartListedSeconds, at.Sub(t0).Seconds())
	}
	rep.StartListedEvery = slices.Max(rep.StartListedSeconds)

	last, p50, missing, err := b.waitNotified(ctx, b.plugins, t0)
	if err != nil {
		return err
	}
	if missing > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("start: %d plugins never told they are registered (their instances are listed); the notified times are of the others", missing))
	}
	rep.StartNotifiedSeconds, rep.StartNotifiedP50 = last.Sub(t0).Seconds(), p50.Sub(t0).Seconds()
	rep.StartCPUPerAgentMs = ms(b.agentsCPU()) / float64(n)
	rep.StartServerCPUMs = ms(clusterCPU(b.sys)-serverCPU0) / members
	rep.StartOthersCPUShare = others()
	logf("agents: all alive on the leader after %.2fs, all %d instances on every server after %.2fs (per server %v), every plugin told after %.2fs",
		rep.StartAllAliveSeconds, total, rep.StartListedEvery, rep.StartListedSeconds, rep.StartNotifiedSeconds)
	return nil
}

// notifyGrace is how long the bench waits for the plugins' registration
// notices once every server lists every instance. The watcher does not
// retry a failed NotifyRegistrationStatus (kubelet does not either), so on
// a starved machine a notice can be lost while the instance is registered.
const notifyGrace = 30 * time.Second

// waitNotified waits until every plugin of ps was told it is registered at
// or after t0 (or the grace ends), and returns the last and the median of
// those times and how many were never told.
func (b *agentBench) waitNotified(ctx context.Context, ps []*benchPlugin, t0 time.Time) (last, p50 time.Time, missing int, err error) {
	var times []time.Time
	collect := func() bool {
		times, missing = times[:0], 0
		for _, p := range ps {
			if at, ok := p.notifiedAfter(t0); ok {
				times = append(times, at)
			} else {
				missing++
			}
		}
		return missing == 0
	}
	waitFor(ctx, notifyGrace, collect)
	collect()
	if ctx.Err() != nil {
		return last, p50, missing, ctx.Err()
	}
	if len(times) == 0 {
		return last, p50, missing, errors.New("agents: no plugin was told it is registered")
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	return times[len(times)-1], times[(len(times)-1)/2], missing, nil
}

// phaseSettle lets the agents settle, then reads their memory and their
// CPU use at rest.
func (b *agentBench) phaseSettle(ctx context.Context) error {
	rep := b.rep
	rep.SettleSeconds = b.o.agentSettle.Seconds()
	logf("agents: settling %v, then reading memory", b.o.agentSettle)
	cpu0, scpu0 := b.agentsCPU(), clusterCPU(b.sys)
	others := b.othersCPU()
	t0 := time.Now()
	// One agent's CPU profile over the settle (-agent-profile): where an
	// agent at rest spends it.
	prof := make(chan error, 1)
	if dir := b.o.agentProfile; dir != "" {
		go func() {
			u := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", fmtAddr(agentIP(0), agentPprofPort), max(1, int(b.o.agentSettle.Seconds())))
			prof <- errors.Join(os.MkdirAll(dir, 0o755), fetch(ctx, u, filepath.Join(dir, "agent-0-rest.pprof")))
		}()
	} else {
		prof <- nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.o.agentSettle):
	}
	el := time.Since(t0)
	if err := <-prof; err != nil {
		return fmt.Errorf("agents: -agent-profile: %w", err)
	}
	rep.SettleOthersCPUShare = others()
	rep.AgentIdleCPUPerSec = ms(b.agentsCPU()-cpu0) / el.Seconds() / float64(len(b.procs))
	rep.ServerIdleCPUPerSec = ms(clusterCPU(b.sys)-scpu0) / el.Seconds() / members
	for _, p := range b.procs {
		rss, err := procStatus(p.pid(), "VmRSS:")
		if err != nil {
			return err
		}
		hwm, _ := procStatus(p.pid(), "VmHWM:")
		rep.AgentRSSBytes = append(rep.AgentRSSBytes, rss)
		rep.AgentHWMMax = max(rep.AgentHWMMax, hwm)
	}
	sorted := slices.Clone(rep.AgentRSSBytes)
	slices.Sort(sorted)
	rep.AgentRSSMedian, rep.AgentRSSMax = sorted[(len(sorted)-1)/2], sorted[len(sorted)-1]
	for i := 0; i < members; i++ {
		rss, _ := procStatus(b.sys.pid(i), "VmRSS:")
		rep.ServerRSSBytes = append(rep.ServerRSSBytes, rss)
	}
	rep.BenchRSSBytes, _ = procStatus(os.Getpid(), "VmRSS:")
	logf("agents: RSS per agent median %.1f MiB, max %.1f MiB; idle CPU %.1f ms/s per agent, %.1f ms/s per server",
		mib(rep.AgentRSSMedian), mib(rep.AgentRSSMax), rep.AgentIdleCPUPerSec, rep.ServerIdleCPUPerSec)
	return nil
}

// othersCPU starts measuring the CPU that processes other than the
// bench, its servers and its agents use; the function it returns gives
// their share of the machine (all cores) since.
func (b *agentBench) othersCPU() func() float64 {
	ours := func() time.Duration {
		self, _ := cpuTime(os.Getpid())
		return self + clusterCPU(b.sys) + b.agentsCPU()
	}
	busy0, ours0, t0 := machineBusy(), ours(), time.Now()
	return func() float64 {
		others := (machineBusy() - busy0) - (ours() - ours0)
		return max(0, others.Seconds()/time.Since(t0).Seconds()/float64(runtime.NumCPU()))
	}
}

// machineBusy is the CPU time all cores have spent not idle, from
// /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var ticks int64
	for i, v := range f {
		if i == 0 || i == 4 || i == 5 || i > 8 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ 100
}

func (b *agentBench) agentsCPU() time.Duration {
	var sum time.Duration
	for _, p := range b.procs {
		if d, err := cpuTime(p.pid()); err == nil {
			sum += d
		}
	}
	return sum
}

// killed are the agents the kill phase kills: spread evenly.
func (b *agentBench) killed() []int {
	var out []int
	for i := 0; i < b.o.agentKill; i++ {
		out = append(out, i*b.o.agents/b.o.agentKill)
	}
	return out
}

// phaseKill kills agents with SIGKILL and times until every server has
// none of their instances, and checks that the others' are untouched.
func (b *agentBench) phaseKill(ctx context.Context) error {
	n, s, rep := b.o.agents, b.o.agentSockets, b.rep
	victims := b.killed()
	dead := map[string]bool{}
	for _, i := range victims {
		dead[agentName(i)] = true
		rep.KilledNodes = append(rep.KilledNodes, agentName(i))
	}
	survivors := (n - len(victims)) * s
	var survivorDeregs0 []int
	for _, t := range b.track {
		survivorDeregs0 = append(survivorDeregs0, t.deregsOf(dead, false))
	}
	if l, err := b.pc.leader(ctx); err != nil || l != b.leader {
		return fmt.Errorf("agents: the leader changed or is unknown before the kill (%d, was %d): %v", l, b.leader, err)
	}
	// One condition per killed node on the leader's stream: when its last
	// instance went.
	perNode := map[string]*trackCond{}
	for nm := range dead {
		perNode[nm] = b.track[b.leader].when(func(t *instTracker) bool { return t.countLocked(nm) == 0 })
	}
	logf("agents: kill -9 of %d agents (node-reap-after %v)", len(victims), b.o.agentReapAfter)
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, i := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.procs[i].kill()
		}()
	}
	wg.Wait()
	deadline := t0.Add(b.o.agentTimeout)

	gone := func(t *instTracker) bool {
		for nm := range dead {
			if t.countLocked(nm) > 0 {
				return false
			}
		}
		return t.total == survivors
	}
	for _, t := range b.track {
		at, err := t.when(gone).wait(ctx, deadline, fmt.Sprintf("the killed agents' instances to leave %s", t.server))
		if err != nil {
			return err
		}
		rep.KillGoneSeconds = append(rep.KillGoneSeconds, at.Sub(t0).Seconds())
	}
	rep.KillGoneEvery = slices.Max(rep.KillGoneSeconds)
	rep.KillGoneLeader = rep.KillGoneSeconds[b.leader]

	var detect, reap []float64
	for nm, c := range perNode {
		gone, err := c.wait(ctx, deadline, nm+" gone on the leader")
		if err != nil {
			return err
		}
		failed, ok := b.members.firstAfter(nm, "failed", t0)
		if !ok {
			rep.Notes = append(rep.Notes, nm+": gone without the leader's poll seeing it failed")
			continue
		}
		detect = append(detect, failed.Sub(t0).Seconds())
		reap = append(reap, gone.Sub(failed).Seconds())
	}
	if len(detect) > 0 {
		slices.Sort(detect)
		slices.Sort(reap)
		rep.KillDetectP50, rep.KillDetectMax = detect[(len(detect)-1)/2], detect[len(detect)-1]
		rep.KillReapP50, rep.KillReapMax = reap[(len(reap)-1)/2], reap[len(reap)-1]
	}
	for k, t := range b.track {
		rep.SurvivorDeregs += t.deregsOf(dead, false) - survivorDeregs0[k]
	}
	// Cross-check with a list on every server: the survivors' instances
	// are all there, the killed ones' are not.
	rep.SurvivorsListed = -1
	for _, nd := range b.pc.nodes {
		byNode, err := b.listAgents(ctx, nd)
		if err != nil {
			return err
		}
		got := 0
		for nm, c := range byNode {
			if dead[nm] {
				return fmt.Errorf("agents: %s still lists %d instances of killed %s", nd.id, c, nm)
			}
			got += c
		}
		if rep.SurvivorsListed < 0 || got < rep.SurvivorsListed {
			rep.SurvivorsListed = got
		}
	}
	if rep.SurvivorDeregs != 0 || rep.SurvivorsListed != survivors {
		rep.Notes = append(rep.Notes, fmt.Sprintf("survivors touched: %d deregistered events, %d of %d listed", rep.SurvivorDeregs, rep.SurvivorsListed, survivors))
	}
	rep.KillReapLogEntries = b.countReapLines()
	logf("agents: killed instances gone from every server after %.2fs (per server %v); failed on the leader after p50 %.2fs max %.2fs; failed->reaped p50 %.2fs max %.2fs; survivors untouched: %v",
		rep.KillGoneEvery, rep.KillGoneSeconds, rep.KillDetectP50, rep.KillDetectMax, rep.KillReapP50, rep.KillReapMax, rep.SurvivorDeregs == 0 && rep.SurvivorsListed == survivors)
	return nil
}

// countReapLines counts "reaped plugins of dead node" in the servers'
// logs: one Raft entry (DeregisterNode) each.
func (b *agentBench) countReapLines() int {
	n := 0
	for _, nd := range b.pc.nodes {
		data, err := os.ReadFile(nd.proc.logPath)
		if err == nil {
			n += strings.Count(string(data), "reaped plugins of dead node")
		}
	}
	return n
}

// listAgents lists every plugin type on one server (stale: its own state)
// and counts the agents' instances by node.
func (b *agentBench) listAgents(ctx context.Context, nd *plugregNode) (map[string]int, error) {
	cli, tr, err := b.sys.newClient([]string{b.sys.c.url(nd)})
	if err != nil {
		return nil, err
	}
	defer tr.CloseIdleConnections()
	out := map[string]int{}
	for _, typ := range pluginTypes(b.o.agentSockets) {
		l, _, err := cli.List(ctx, typ, &client.QueryOptions{Stale: true})
		if err != nil {
			return nil, fmt.Errorf("list %s on %s: %w", typ, nd.id, err)
		}
		// A list has the newest instance of each name; the recency list
		// of each name has them all.
		for _, p := range l {
			insts, _, err := cli.Instances(ctx, typ, p.Name, &client.QueryOptions{Stale: true})
			if err != nil {
				return nil, fmt.Errorf("instances of %s/%s on %s: %w", typ, p.Name, nd.id, err)
			}
			for _, inst := range insts {
				if strings.HasPrefix(inst.NodeID, agentPrefix) {
					out[inst.NodeID]++
				}
			}
		}
	}
	return out, nil
}

// phaseRestart starts the killed agents again (same data dirs and
// addresses) and times until their instances are back everywhere.
func (b *agentBench) phaseRestart(ctx context.Context) error {
	total, rep := b.o.agents*b.o.agentSockets, b.rep
	victims := b.killed()
	isVictim := map[int]bool{}
	for _, i := range victims {
		isVictim[i] = true
	}
	var ps []*benchPlugin
	for _, p := range b.plugins {
		if isVictim[p.agent] {
			ps = append(ps, p)
		}
	}
	logf("agents: restarting the %d killed agents", len(victims))
	t0 := time.Now()
	for _, i := range victims {
		if err := b.procs[i].start(); err != nil {
			return err
		}
	}
	deadline := t0.Add(b.o.agentTimeout)
	all := func(t *instTracker) bool { return t.total == total }
	for _, t := range b.track {
		at, err := t.when(all).wait(ctx, deadline, fmt.Sprintf("the restarted agents' instances back on %s", t.server))
		if err != nil {
			return err
		}
		rep.RestartListedSeconds = append(rep.RestartListedSeconds, at.Sub(t0).Seconds())
	}
	rep.RestartListedEvery = slices.Max(rep.RestartListedSeconds)
	last, _, missing, err := b.waitNotified(ctx, ps, t0)
	if err != nil {
		return err
	}
	if missing > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("restart: %d plugins never told they are registered again (their instances are listed)", missing))
	}
	rep.RestartNotifiedSecond = last.Sub(t0).Seconds()
	logf("agents: restarted agents' instances back on every server after %.2fs, their plugins told after %.2fs", rep.RestartListedEvery, rep.RestartNotifiedSecond)
	return nil
}

// stopAll stops every agent (SIGTERM, all at once, SIGKILL after 10 s),
// then every plugin (which removes its socket).
func (b *agentBench) stopAll() {
	var wg sync.WaitGroup
	for _, p := range b.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(10 * time.Second)
		}()
	}
	wg.Wait()
	for _, p := range b.plugins {
		p.p.Stop()
	}
}

func fmtAddr(ip string, port int) string { return ip + ":" + strconv.Itoa(port) }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func mib(v int64) float64 { return float64(v) / (1 << 20) }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func printAgents(w io.Writer, r *agentsReport) {
	pf := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	secs := func(v []float64) string {
		var s []string
		for _, x := range v {
			s = append(s, fmt.Sprintf("%.2f", x))
		}
		return strings.Join(s, " / ")
	}
	pf("client agents at scale: %d agents (%s) x %d plugin sockets = %d instances; node-reap-after %s; load average %s at start, %s at end\n\n",
		r.Agents, r.AgentKind, r.SocketsPerAgent, r.Instances, r.NodeReapAfter, r.LoadAvgStart, r.LoadAvgEnd)
	pf("%-58s %s\n", "figure", "value")
	pf("%s\n", strings.Repeat("-", 100))
	pf("%-58s %.2f s (sockets %.2f s; start interval %s, GOMAXPROCS %d)\n", "start: sockets made and agent processes started", r.StartSpawnSeconds, r.StartSocketsSeconds, r.StartInterval, r.GoMaxProcs)
	pf("%-58s %.2f s\n", "start: every agent alive in the leader's gossip view", r.StartAllAliveSeconds)
	pf("%-58s %.2f s (per server %s)\n", fmt.Sprintf("start: all %d instances listed by every server", r.Instances), r.StartListedEvery, secs(r.StartListedSeconds))
	pf("%-58s %.2f s (median plugin %.2f s)\n", "start: every plugin told registered", r.StartNotifiedSeconds, r.StartNotifiedP50)
	pf("%-58s %.0f ms per agent, %.0f ms per server; other work used %.0f%% of the machine\n", "start: CPU time used until then", r.StartCPUPerAgentMs, r.StartServerCPUMs, 100*r.StartOthersCPUShare)
	pf("%-58s median %.1f MiB, max %.1f MiB (peak max %.1f MiB)\n", fmt.Sprintf("RSS per agent process after %.0fs", r.SettleSeconds), mib(r.AgentRSSMedian), mib(r.AgentRSSMax), mib(r.AgentHWMMax))
	pf("%-58s %.1f ms/s per agent, %.1f ms/s per server; other work used %.0f%% of the machine\n", "CPU at rest", r.AgentIdleCPUPerSec, r.ServerIdleCPUPerSec, 100*r.SettleOthersCPUShare)
	var srss []string
	for _, v := range r.ServerRSSBytes {
		srss = append(srss, fmt.Sprintf("%.0f", mib(v)))
	}
	pf("%-58s servers %s MiB; bench process (all plugin servers) %.0f MiB\n", "RSS of the others", strings.Join(srss, " / "), mib(r.BenchRSSBytes))
	if r.Killed > 0 && len(r.KillGoneSeconds) > 0 {
		pf("%-58s p50 %.2f s, max %.2f s\n", fmt.Sprintf("kill -9 of %d: marked failed in the leader's gossip", r.Killed), r.KillDetectP50, r.KillDetectMax)
		pf("%-58s p50 %.2f s, max %.2f s\n", "kill: failed -> last instance gone on the leader", r.KillReapP50, r.KillReapMax)
		pf("%-58s %.2f s (per server %s)\n", fmt.Sprintf("kill: all %d instances gone from every server", r.Killed*r.SocketsPerAgent), r.KillGoneEvery, secs(r.KillGoneSeconds))
		pf("%-58s %d deregistered events, %d of %d listed everywhere; %d reap entries logged\n", "kill: the survivors", r.SurvivorDeregs, r.SurvivorsListed, (r.Agents-r.Killed)*r.SocketsPerAgent, r.KillReapLogEntries)
	}
	if len(r.RestartListedSeconds) > 0 {
		pf("%-58s %.2f s (per server %s)\n", "restart of the killed: instances back on every server", r.RestartListedEvery, secs(r.RestartListedSeconds))
		pf("%-58s %.2f s\n", "restart: every one of their plugins told registered", r.RestartNotifiedSecond)
	}
	for _, n := range r.Notes {
		pf("note: %s\n", n)
	}
}
