package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/api"
)

// A host process of the fleet simulator (-fleet-hosts-child): many
// simulated hosts in one process, each a real agent.Client (its own RPC
// connections to the servers, its own upstream event stream) and a real
// agent.Host (its 20 plugins registered through it, anti-entropy running).
// The bench drives it over a small HTTP control API on the process's own
// loopback address.

// fleetChildSpec is what the bench tells a host process (one JSON flag).
type fleetChildSpec struct {
	Dir     string `json:"dir"`     // the hosts' data dirs go under it
	IP      string `json:"ip"`      // the hosts' address: RPC from it, gossip on it
	Control string `json:"control"` // host:port of the control API
	From    int    `json:"from"`    // first host's number in the fleet
	Count   int    `json:"count"`
	// Gossip hosts (the first Gossip of this process) run memberlist on
	// GossipPort+j and join Join; the others get StaticServers.
	Gossip     int      `json:"gossip"`
	GossipPort int      `json:"gossip_port"`
	Join       []string `json:"join"`
	Servers    []string `json:"servers"`
	Plugins    int      `json:"plugins"`
	// SignalType is the type every host's upstream streams: the bench's
	// markers are written there, so that "this host's upstream delivers"
	// can be timed; the fleet's own plugins are of other types.
	SignalType string `json:"signal_type"`
	// Fleet is the number of hosts once this process's have started: a
	// host without gossip does not count its pool, and its anti-entropy
	// schedule scales with the fleet as a real agent's does.
	Fleet int `json:"fleet"`
}

// fleetHostName is host i's node ID.
func fleetHostName(i int) string { return fmt.Sprintf("%s%05d", fleetHostPrefix, i) }

const fleetHostPrefix = "fleet-h"

// fleetTypes are the types of the fleet's plugins: a mix, as a CSI node
// plugin, a DRA driver and a device plugin run on every host.
var fleetTypes = []string{"fleet-csi", "fleet-dra", "fleet-dev"}

// fleetPlugin is plugin k of host i: the same 20 names on every host, an
// AllocID of the host's own.
func fleetPlugin(i, k int, version string) *api.PluginInfo {
	typ := fleetTypes[k%len(fleetTypes)]
	return &api.PluginInfo{
		Type: typ, Name: fmt.Sprintf("%s-%02d.fleet.plugreg.io", typ, k), AllocID: fmt.Sprintf("h%05d-p%02d", i, k),
		Version:        version,
		ConnectionInfo: &api.ConnectionInfo{SocketPath: fmt.Sprintf("/var/lib/kubelet/plugins/p%02d/csi.sock", k)},
		Options:        map[string]string{api.OptionSource: api.SourceKubelet, "zone": "eu-west-1a"},
	}
}

// simHost is one simulated host.
type simHost struct {
	idx  int
	cl   *agent.Client
	host *agent.Host

	mu      sync.Mutex
	signals map[uint64]int64 // marker index -> receipt, unix ns
	resets  int
	reopens int // the subscriber channel closed and was opened again
}

func (h *simHost) noteSignal(idx uint64, at int64) {
	h.mu.Lock()
	if len(h.signals) > 4096 { // bounded: the bench reads recent markers only
		clear(h.signals)
	}
	h.signals[idx] = at
	h.mu.Unlock()
}

type fleetChild struct {
	spec   fleetChildSpec
	logger hclog.Logger
	ctx    context.Context
	wg     sync.WaitGroup

	mu      sync.Mutex
	hosts   []*simHost
	putMs   []float64 // start-storm write latencies, drained by /state
	putErrs int

	started   atomic.Int64 // hosts whose Client and Host run
	announced atomic.Int64 // hosts whose 20 first writes returned (ok or not)
	failed    atomic.Int64 // hosts that could not start
}

// runFleetChild is the -fleet-hosts-child mode's main.
func runFleetChild(specJSON string) error {
	var spec fleetChildSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("-fleet-hosts-child: bad spec: %w", err)
	}
	if spec.Count < 1 || spec.Plugins < 1 || len(spec.Servers) == 0 || spec.Gossip > spec.Count {
		return fmt.Errorf("-fleet-hosts-child: spec out of range: %+v", spec)
	}
	raiseNoFile()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c := &fleetChild{spec: spec, ctx: ctx, logger: hclog.New(&hclog.LoggerOptions{Name: "fleet", Level: hclog.Warn, Output: os.Stderr})}
	ln, err := net.Listen("tcp", spec.Control)
	if err != nil {
		return fmt.Errorf("control listen %s: %w", spec.Control, err)
	}
	srv := &http.Server{Handler: c.mux()}
	go srv.Serve(ln)
	c.hosts = make([]*simHost, spec.Count)
	for j := 0; j < spec.Count; j++ {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.runHost(j)
		}()
	}
	<-ctx.Done()
	c.wg.Wait() // every host shut down
	shutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return srv.Shutdown(shutCtx)
}

// raiseNoFile lifts the soft open-files limit to the hard one: each host
// holds connections to the servers.
func raiseNoFile() {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
}

// runHost starts host j of this process, registers its plugins, runs its
// anti-entropy and reads its upstream until the process is told to stop.
func (c *fleetChild) runHost(j int) {
	s := c.spec
	i := s.From + j
	cfg := agent.Config{NodeID: fleetHostName(i), DataDir: filepath.Join(s.Dir, fleetHostName(i)), BindAddr: s.IP,
		Logger: c.logger.Named(fleetHostName(i))}
	if j < s.Gossip {
		cfg.GossipPort, cfg.Join, cfg.RetryJoin = s.GossipPort+j, s.Join, true
	} else {
		cfg.StaticServers = s.Servers
	}
	cl, err := agent.New(cfg)
	if err != nil {
		c.failed.Add(1)
		c.logger.Error("host did not start", "host", cfg.NodeID, "error", err)
		return
	}
	defer cl.Shutdown()
	members := cl.GossipMembers
	if cfg.StaticServers != nil {
		members = func() int { return s.Fleet + len(s.Servers) }
	}
	host, err := agent.NewHost(agent.HostConfig{Backend: cl, Sources: []string{api.SourceKubelet}, LiveServers: cl.LiveServers, Members: members, Logger: cfg.Logger})
	if err != nil {
		c.failed.Add(1)
		return
	}
	h := &simHost{idx: i, cl: cl, host: host, signals: map[uint64]int64{}}
	c.mu.Lock()
	c.hosts[j] = h
	c.mu.Unlock()
	c.started.Add(1)

	ctx := c.ctx
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.follow(ctx, h)
	}()
	var lat []float64
	errs := 0
	for k := 0; k < s.Plugins; k++ {
		t0 := time.Now()
		if err := host.Register(ctx, fleetPlugin(i, k, "1.0.0")); err != nil {
			errs++ // anti-entropy registers it later
			if errs == 1 {
				c.logger.Warn("start write failed; anti-entropy redoes it", "host", cfg.NodeID, "after", time.Since(t0), "error", err)
			}
		} else {
			lat = append(lat, ms(time.Since(t0)))
		}
	}
	c.mu.Lock()
	c.putMs = append(c.putMs, lat...)
	c.putErrs += errs
	c.mu.Unlock()
	c.announced.Add(1)
	host.Ready(api.SourceKubelet)
	host.Run(ctx)
}

// follow keeps one local subscriber on the host's upstream (the signal
// type) and records when each marker arrived.
func (c *fleetChild) follow(ctx context.Context, h *simHost) {
	types := []string{c.spec.SignalType}
	var from *uint64
	for ctx.Err() == nil {
		ch, _, err := h.cl.Subscribe(ctx, types, from, 0)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range ch {
			switch ev.EventType {
			case api.EventReset:
				h.mu.Lock()
				h.resets++
				h.mu.Unlock()
			case api.EventRegistered, api.EventUpdated:
				h.noteSignal(ev.Index, time.Now().UnixNano())
			}
			if ev.Index > 0 {
				idx := ev.Index
				from = &idx
			}
		}
		h.mu.Lock()
		h.reopens++
		h.mu.Unlock()
	}
}

// ---- the control API ----

// fleetChildState is GET /state.
type fleetChildState struct {
	Started   int       `json:"started"`
	Announced int       `json:"announced"`
	Failed    int       `json:"failed"`
	PutMs     []float64 `json:"put_ms,omitempty"` // drained
	PutErrors int       `json:"put_errors"`
	Resets    int       `json:"resets"`
	Reopens   int       `json:"reopens"`
	Upstreams int       `json:"upstreams"`
	Opens     uint64    `json:"upstream_opens"`
	AERounds  int       `json:"ae_rounds"`
	AEFailed  int       `json:"ae_failed"`
	AEWrites  int       `json:"ae_writes"`
}

// fleetChurnWrite is one write of a churn, as /churn returns it.
type fleetChurnWrite struct {
	Index   uint64 `json:"index"`
	StartNs int64  `json:"start_ns"`
	AckNs   int64  `json:"ack_ns"`
	Err     string `json:"err,omitempty"`
}

func (c *fleetChild) mux() *http.ServeMux {
	m := http.NewServeMux()
	// The host process's own profile (curl .../debug/pprof/profile):
	// where a simulated host's CPU at rest goes.
	m.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	m.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, c.state(r.URL.Query().Get("drain") == "1"))
	})
	m.HandleFunc("GET /signals", func(w http.ResponseWriter, r *http.Request) {
		idx, err := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
		if err != nil {
			http.Error(w, "index: "+err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, c.signalTimes(idx))
	})
	m.HandleFunc("POST /churn", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		every, err1 := time.ParseDuration(q.Get("every"))
		n, err2 := strconv.Atoi(q.Get("n"))
		offset, err3 := time.ParseDuration(q.Get("offset"))
		if err := errors.Join(err1, err2, err3); err != nil || every <= 0 || n < 0 {
			http.Error(w, fmt.Sprintf("churn: every, n, offset: %v", err), http.StatusBadRequest)
			return
		}
		writeJSON(w, c.churn(r.Context(), every, n, offset, q.Get("version")))
	})
	return m
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (c *fleetChild) liveHosts() []*simHost {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*simHost, 0, len(c.hosts))
	for _, h := range c.hosts {
		if h != nil {
			out = append(out, h)
		}
	}
	return out
}

func (c *fleetChild) state(drain bool) fleetChildState {
	st := fleetChildState{Started: int(c.started.Load()), Announced: int(c.announced.Load()), Failed: int(c.failed.Load())}
	c.mu.Lock()
	st.PutErrors = c.putErrs
	if drain {
		st.PutMs, c.putMs = c.putMs, nil
	}
	c.mu.Unlock()
	for _, h := range c.liveHosts() {
		h.mu.Lock()
		st.Resets += h.resets
		st.Reopens += h.reopens
		h.mu.Unlock()
		es := h.cl.EventStats()
		st.Upstreams += es.Upstreams
		st.Opens += es.UpstreamOpens
		hs := h.host.Stats()
		st.AERounds += hs.Rounds
		st.AEFailed += hs.Failed
		st.AEWrites += hs.Registered + hs.Deregistered
	}
	return st
}

// signalTimes is when each host received the marker at idx (unix ns; 0:
// not yet), in host order.
func (c *fleetChild) signalTimes(idx uint64) []int64 {
	hosts := c.liveHosts()
	out := make([]int64, 0, len(hosts))
	for _, h := range hosts {
		h.mu.Lock()
		out = append(out, h.signals[idx])
		h.mu.Unlock()
	}
	return out
}

// churn makes n writes, one every `every` after offset, each an update of
// one plugin of one host (round robin) through its Host, as a host whose
// plugin changed version would.
func (c *fleetChild) churn(ctx context.Context, every time.Duration, n int, offset time.Duration, version string) []fleetChurnWrite {
	hosts := c.liveHosts()
	out := make([]fleetChurnWrite, n)
	if len(hosts) == 0 {
		return nil
	}
	var wg sync.WaitGroup
	start := time.Now().Add(offset)
	for w := 0; w < n; w++ {
		if d := time.Until(start.Add(time.Duration(w) * every)); d > 0 {
			select {
			case <-ctx.Done():
				return out[:w]
			case <-time.After(d):
			}
		}
		h := hosts[w%len(hosts)]
		k := (w / len(hosts)) % c.spec.Plugins
		wg.Add(1)
		go func() { // open loop: a slow write does not hold the next back
			defer wg.Done()
			t0 := time.Now()
			res, err := h.host.Put(ctx, fleetPlugin(h.idx, k, fmt.Sprintf("%s.%d", version, w)))
			cw := fleetChurnWrite{Index: res.Index, StartNs: t0.UnixNano(), AckNs: time.Now().UnixNano()}
			if err != nil {
				cw.Err = err.Error()
			}
			out[w] = cw
		}()
	}
	wg.Wait()
	return out
}
