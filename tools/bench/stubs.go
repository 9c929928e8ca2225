package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/api/pluginrpc"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/stub"
)

// The -stub-sessions mode: N plugins (package stub, in this process)
// connected to one `plugreg agent -client` process, the agent's cost per
// session read from /proc (its RSS and CPU time), and the event fan-out
// to all of them timed, with and without sessions that never read.

const (
	stubType      = "bench-stub"
	stubWatchType = "bench-watch"
)

// stubsReport is the -stub-sessions mode's figures.
type stubsReport struct {
	Sessions  int    `json:"sessions"`
	AgentKind string `json:"agent_kind"`
	// Connect: Start of every stub (concurrency 64) until each returned
	// (registered with the agent); listed: until every server lists all.
	ConnectSeconds float64 `json:"connect_seconds"`
	ListedSeconds  float64 `json:"listed_every_server_seconds"`
	// The agent process: RSS before any session and with all of them, and
	// the difference per session; CPU at rest per session.
	AgentRSSBaseMiB      float64 `json:"agent_rss_base_mib"`
	AgentRSSMiB          float64 `json:"agent_rss_mib"`
	RSSPerSessionKiB     float64 `json:"rss_per_session_kib"`
	IdleCPUPerSessionUs  float64 `json:"idle_cpu_per_session_us_per_s"`
	ConnectCPUPerSession float64 `json:"connect_agent_cpu_per_session_ms"`
	// A burst of writes of the watched type, each delivered to every
	// session: time until every plugin's handler had all, and the agent's
	// CPU per delivered event.
	BurstWrites          int     `json:"burst_writes"`
	BurstSeconds         float64 `json:"burst_seconds"`
	AgentCPUPerDelivery  float64 `json:"agent_cpu_per_delivery_us"`
	SilentSessions       int     `json:"silent_sessions"`
	BurstSilentSeconds   float64 `json:"burst_with_silent_seconds"`
	SilentOverQuietRatio float64 `json:"burst_with_silent_over_without"`
	// Stop of every stub until every server lists none.
	StopSeconds float64 `json:"stop_gone_every_server_seconds"`
	// The etcd peer, measured in the same run, and plugreg/etcd ratios
	// (lower is better for plugreg on every one of them).
	Etcd   *etcdStubsReport   `json:"etcd,omitempty"`
	Ratios map[string]float64 `json:"ratios_plugreg_over_etcd,omitempty"`
}

// countPlugin counts the registered events its handler gets.
type countPlugin struct{ n atomic.Int64 }

func (c *countPlugin) Registered(context.Context, *api.Event) error {
	c.n.Add(1)
	return nil
}

type stubBench struct {
	o   *options
	pc  *plugregCluster
	sys *plugregSystem
	// onServer[i] reads server i's own replica (one client each, made once)
	onServer []*client.Client
	agent    *proc
	sock     string
	stubs    []*stub.Stub
	plugins  []*countPlugin
	rep      *stubsReport
}

func runStubs(ctx context.Context, o *options, pc *plugregCluster, ec *etcdCluster, bin, dir string) (*stubsReport, error) {
	rep := &stubsReport{Sessions: o.stubSessions, AgentKind: "process (plugreg agent -client)", SilentSessions: o.stubSilent, BurstWrites: o.stubBurst}
	b := &stubBench{o: o, pc: pc, sys: &plugregSystem{c: pc}, sock: filepath.Join(dir, "st.sock"), rep: rep}
	if len(b.sock) > 107 {
		return rep, fmt.Errorf("socket path %s is too long for a unix socket; use a shorter -dir", b.sock)
	}
	for _, nd := range pc.nodes {
		cli, tr, err := b.sys.newClient([]string{b.sys.c.url(nd)})
		if err != nil {
			return rep, err
		}
		defer tr.CloseIdleConnections()
		b.onServer = append(b.onServer, cli)
	}
	adir := filepath.Join(dir, "stub-agent")
	if err := os.MkdirAll(adir, 0o755); err != nil {
		return rep, err
	}
	args := []string{"agent", "-client", "-node", "stub-host", "-data-dir", filepath.Join(adir, "data"),
		"-bind", agentIP(0), "-http-port", strconv.Itoa(agentHTTPPort), "-gossip-port", strconv.Itoa(agentGossipPort),
		"-plugin-socket", b.sock, "-retry-join", "-log-level", "warn"}
	for _, nd := range pc.nodes {
		args = append(args, "-join", fmtAddr(nd.ip, nd.gossipPort))
	}
	b.agent = &proc{name: "stub-agent", path: bin, args: args, logPath: filepath.Join(adir, "agent.log")}
	if err := b.agent.start(); err != nil {
		return rep, err
	}
	defer b.agent.stop(10 * time.Second)
	defer b.stopStubs()
	if !waitFor(ctx, 30*time.Second, func() bool { _, err := os.Stat(b.sock); return err == nil }) {
		return rep, fmt.Errorf("stubs: the agent's plugin socket %s did not appear (log: %s)", b.sock, b.agent.logPath)
	}
	time.Sleep(2 * time.Second) // the agent's start settles
	rss0, err := procStatus(b.agent.pid(), "VmRSS:")
	if err != nil {
		return rep, err
	}
	rep.AgentRSSBaseMiB = mib(rss0)
	for _, phase := range []func(context.Context) error{b.phaseConnect, b.phaseIdle, b.phaseBurst, b.phaseStop} {
		if err := phase(ctx); err != nil {
			return rep, err
		}
	}
	if ec == nil {
		return rep, nil
	}
	if rep.Etcd, err = runStubsEtcd(ctx, o, ec); err != nil {
		return rep, err
	}
	e := rep.Etcd
	rep.Ratios = map[string]float64{
		"connect_seconds":      rep.ConnectSeconds / e.ConnectSeconds,
		"rss_per_session":      rep.RSSPerSessionKiB / e.RSSPerSessionKiB,
		"idle_cpu_per_session": rep.IdleCPUPerSessionUs / e.IdleCPUPerSessionUs,
		"burst_seconds":        rep.BurstSeconds / e.BurstSeconds,
		"cpu_per_delivery":     rep.AgentCPUPerDelivery / e.CPUPerDeliveryUs,
		"stop_seconds":         rep.StopSeconds / e.StopSeconds,
	}
	return rep, nil
}

// listedEverywhere reports whether every server's own replica lists n
// instances of the stub type.
func (b *stubBench) listedEverywhere(ctx context.Context, n int) bool {
	for _, cli := range b.onServer {
		l, _, err := cli.List(ctx, stubType, &client.QueryOptions{Stale: true})
		if errors.Is(err, api.ErrNotFound) {
			l, err = nil, nil
		}
		if err != nil || len(l) != n {
			return false
		}
	}
	return true
}

func (b *stubBench) phaseConnect(ctx context.Context) error {
	n := b.o.stubSessions
	logf("stubs: connecting %d plugins to one client agent", n)
	cpu0, _ := cpuTime(b.agent.pid())
	quiet := slog.New(slog.DiscardHandler)
	t0 := time.Now()
	b.stubs, b.plugins = make([]*stub.Stub, n), make([]*countPlugin, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := range n {
		b.plugins[i] = &countPlugin{}
		s, err := stub.New(b.plugins[i], stub.WithSocketPath(b.sock), stub.WithPluginType(stubType), stub.WithPluginName(fmt.Sprintf("p%05d", i)),
			stub.WithEndpoint("/run/bench.sock"), stub.WithEventMask(stub.Registered, stubWatchType), stub.WithLogger(quiet))
		if err != nil {
			return err
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := s.Start(sctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			mu.Lock()
			b.stubs[i] = s
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stubs: %d of %d failed to start: %w", len(errs), n, errs[0])
	}
	b.rep.ConnectSeconds = time.Since(t0).Seconds()
	if !waitFor(ctx, 2*time.Minute, func() bool { return b.listedEverywhere(ctx, n) }) {
		return errors.New("stubs: not every plugin listed on every server within 2m")
	}
	b.rep.ListedSeconds = time.Since(t0).Seconds()
	cpu1, _ := cpuTime(b.agent.pid())
	b.rep.ConnectCPUPerSession = ms(cpu1-cpu0) / float64(n)
	logf("stubs: %d registered after %.2fs, listed on every server after %.2fs", n, b.rep.ConnectSeconds, b.rep.ListedSeconds)
	return nil
}

func (b *stubBench) phaseIdle(ctx context.Context) error {
	n := b.o.stubSessions
	settle := b.o.agentSettle
	cpu0, _ := cpuTime(b.agent.pid())
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settle):
	}
	cpu1, _ := cpuTime(b.agent.pid())
	rss, err := procStatus(b.agent.pid(), "VmRSS:")
	if err != nil {
		return err
	}
	b.rep.AgentRSSMiB = mib(rss)
	b.rep.RSSPerSessionKiB = float64(rss-int64(b.rep.AgentRSSBaseMiB*(1<<20))) / 1024 / float64(n)
	b.rep.IdleCPUPerSessionUs = float64(cpu1-cpu0) / float64(time.Microsecond) / settle.Seconds() / float64(n)
	logf("stubs: agent RSS %.1f MiB (%.1f KiB per session), idle CPU %.2f µs/s per session", b.rep.AgentRSSMiB, b.rep.RSSPerSessionKiB, b.rep.IdleCPUPerSessionUs)
	return nil
}

// burst writes m registrations of the watched type (16 writers) and
// returns how long until every plugin's handler had them, and the agent's
// CPU meanwhile.
func (b *stubBench) burst(ctx context.Context, round, m int) (time.Duration, time.Duration, error) {
	want := make([]int64, len(b.plugins))
	for i, p := range b.plugins {
		want[i] = p.n.Load() + int64(m)
	}
	cli, tr, err := b.sys.newClient(b.pc.httpAddrs())
	if err != nil {
		return 0, 0, err
	}
	defer tr.CloseIdleConnections()
	cpu0, _ := cpuTime(b.agent.pid())
	t0 := time.Now()
	err = writeBurst(m, func(k int) error {
		p := &api.PluginInfo{Type: stubWatchType, Name: fmt.Sprintf("r%d-w%05d", round, k), AllocID: "a",
			NodeID: "bench", ConnectionInfo: &api.ConnectionInfo{Address: "127.0.0.1:1"}}
		_, err := cli.Register(ctx, p)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("stubs: burst write: %w", err)
	}
	if !waitFor(ctx, 2*time.Minute, func() bool {
		for i, p := range b.plugins {
			if p.n.Load() < want[i] {
				return false
			}
		}
		return true
	}) {
		return 0, 0, errors.New("stubs: not every plugin got the burst within 2m")
	}
	took := time.Since(t0)
	cpu1, _ := cpuTime(b.agent.pid())
	return took, cpu1 - cpu0, nil
}

func (b *stubBench) phaseBurst(ctx context.Context) error {
	m, n := b.o.stubBurst, b.o.stubSessions
	took, cpu, err := b.burst(ctx, 0, m)
	if err != nil {
		return err
	}
	b.rep.BurstSeconds = took.Seconds()
	b.rep.AgentCPUPerDelivery = float64(cpu) / float64(time.Microsecond) / float64(m*n)
	logf("stubs: %d writes delivered to all %d plugins in %.2fs, agent CPU %.1f µs per delivery", m, n, took.Seconds(), b.rep.AgentCPUPerDelivery)
	if b.o.stubSilent == 0 {
		return nil
	}
	// Sessions that register and subscribe, then never read.
	conn, err := grpc.NewClient("unix://"+b.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range b.o.stubSilent {
		st, err := pluginrpc.NewPluginsClient(conn).Session(sctx)
		if err != nil {
			return err
		}
		st.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: &pb.Register{Type: "bench-silent", Name: fmt.Sprintf("s%03d", i), Idx: "00", Endpoint: &pb.Endpoint{Address: "x"}}}})
		if _, err := st.Recv(); err != nil {
			return fmt.Errorf("stubs: silent session: %w", err)
		}
		st.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Subscribe{Subscribe: &pb.Subscribe{Mask: uint32(stub.AllEvents)}}})
	}
	took2, _, err := b.burst(ctx, 1, m)
	if err != nil {
		return err
	}
	b.rep.BurstSilentSeconds = took2.Seconds()
	b.rep.SilentOverQuietRatio = took2.Seconds() / took.Seconds()
	logf("stubs: with %d sessions that never read: %.2fs (%.2fx)", b.o.stubSilent, took2.Seconds(), b.rep.SilentOverQuietRatio)
	return nil
}

func (b *stubBench) phaseStop(ctx context.Context) error {
	t0 := time.Now()
	b.stopStubs()
	if !waitFor(ctx, 2*time.Minute, func() bool { return b.listedEverywhere(ctx, 0) }) {
		return errors.New("stubs: plugins still listed 2m after Stop")
	}
	b.rep.StopSeconds = time.Since(t0).Seconds()
	logf("stubs: all stopped and gone from every server after %.2fs", b.rep.StopSeconds)
	return nil
}

// stopStubs stops every stub (orderly: each deregisters), 64 at a time.
func (b *stubBench) stopStubs() {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i, s := range b.stubs {
		if s == nil {
			continue
		}
		b.stubs[i] = nil
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.Stop()
		}()
	}
	wg.Wait()
}

func printStubs(w io.Writer, r *stubsReport) {
	fmt.Fprintf(w, "\n%d plugins (package stub) connected to one client agent process\n", r.Sessions)
	fmt.Fprintf(w, "  connect: all registered %.2fs, listed on every server %.2fs, agent CPU %.2f ms per session\n", r.ConnectSeconds, r.ListedSeconds, r.ConnectCPUPerSession)
	fmt.Fprintf(w, "  agent RSS %.1f MiB -> %.1f MiB: %.1f KiB per session; idle CPU %.2f µs/s per session\n", r.AgentRSSBaseMiB, r.AgentRSSMiB, r.RSSPerSessionKiB, r.IdleCPUPerSessionUs)
	fmt.Fprintf(w, "  burst of %d writes to every session: %.2fs, agent CPU %.1f µs per delivery\n", r.BurstWrites, r.BurstSeconds, r.AgentCPUPerDelivery)
	if r.SilentSessions > 0 {
		fmt.Fprintf(w, "  same burst with %d sessions that never read: %.2fs (%.2fx)\n", r.SilentSessions, r.BurstSilentSeconds, r.SilentOverQuietRatio)
	}
	fmt.Fprintf(w, "  stop: all gone from every server %.2fs\n", r.StopSeconds)
	if e := r.Etcd; e != nil {
		fmt.Fprintf(w, "\netcd peer (same run): %d clients on one member, each a lease (TTL 10s) kept alive, its key, a watch\n", r.Sessions)
		fmt.Fprintf(w, "  %-28s %12s %12s %8s\n", "", "plugreg", "etcd", "ratio")
		row := func(name, key string, p, v float64) {
			fmt.Fprintf(w, "  %-28s %12.2f %12.2f %8.2f\n", name, p, v, r.Ratios[key])
		}
		row("connect all (s)", "connect_seconds", r.ConnectSeconds, e.ConnectSeconds)
		row("RSS per session (KiB)", "rss_per_session", r.RSSPerSessionKiB, e.RSSPerSessionKiB)
		row("idle CPU per session (µs/s)", "idle_cpu_per_session", r.IdleCPUPerSessionUs, e.IdleCPUPerSessionUs)
		row("burst to all (s)", "burst_seconds", r.BurstSeconds, e.BurstSeconds)
		row("CPU per delivery (µs)", "cpu_per_delivery", r.AgentCPUPerDelivery, e.CPUPerDeliveryUs)
		row("orderly stop of all (s)", "stop_seconds", r.StopSeconds, e.StopSeconds)
	}
}

// writeBurst makes writes 0..m-1 with 16 writers and returns the first
// error (a writer stops at its first).
func writeBurst(m int, write func(k int) error) error {
	var wg sync.WaitGroup
	var werr atomic.Value
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < m; k += 16 {
				if err := write(k); err != nil {
					werr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	err, _ := werr.Load().(error)
	return err
}
