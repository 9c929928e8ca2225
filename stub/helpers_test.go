package stub_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/agent/pluginsock"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/stub"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// env is a real three-server cluster in-process with a real agent plugin
// socket on its first node.
type env struct {
	t     *testing.T
	c     *testcluster.Cluster
	path  string
	grace time.Duration
	// regTimeout is the agent's registration timeout (zero: the default).
	regTimeout time.Duration
	// registryDelay holds each of the agent's registry writes for a
	// plugin this long (zero: none): a slow registry, so an agent slow to
	// answer a registration.
	registryDelay time.Duration
	svc           *agent.Services
}

func newEnv(t *testing.T, grace time.Duration) *env {
	t.Helper()
	e := newEnvWithoutAgent(t, grace)
	e.startAgent()
	return e
}

// newEnvWithoutAgent is the cluster of an env, with no agent services
// (and no plugin socket) until startAgent.
func newEnvWithoutAgent(t *testing.T, grace time.Duration) *env {
	t.Helper()
	c := testcluster.New(t, 3, testcluster.Options{})
	dir, err := os.MkdirTemp("", "stub") // short: a socket path has 107 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{t: t, c: c, path: filepath.Join(dir, "plugin.sock"), grace: grace}
	t.Cleanup(func() {
		if e.svc != nil {
			e.svc.Stop()
		}
	})
	return e
}

// startAgent starts (or restarts) the agent's services on node 1.
func (e *env) startAgent() {
	e.t.Helper()
	be := e.c.Nodes[0].Backend()
	var registry agent.Writer = be
	if e.registryDelay > 0 {
		registry = slowRegistry{Writer: be, delay: e.registryDelay}
	}
	svc, err := agent.StartServices(registry, agent.ServicesConfig{PluginSocket: &pluginsock.Config{
		Path: e.path, Grace: e.grace, RegistrationTimeout: e.regTimeout, Heartbeat: 200 * time.Millisecond, Events: be,
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.svc = svc
}

// slowRegistry is a registry whose plugin registrations take delay
// longer (or until their ctx ends).
type slowRegistry struct {
	agent.Writer
	delay time.Duration
}

func (r slowRegistry) Register(ctx context.Context, p *api.PluginInfo) (api.WriteResult, error) {
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r.Writer.Register(ctx, p)
	case <-ctx.Done():
		return api.WriteResult{}, ctx.Err()
	}
}

// listedEverywhere reports whether every server's own replica lists
// exactly n instances of typ/name.
func (e *env) listedEverywhere(typ, name string, n int) bool {
	for _, node := range e.c.Nodes {
		res, err := node.Backend().Query(context.Background(), api.Query{Kind: api.QueryInstances, Type: typ, Name: name, Consistency: api.Stale})
		if errors.Is(err, api.ErrNotFound) && n == 0 {
			continue
		}
		if err != nil || len(res.Plugins) != n {
			return false
		}
	}
	return true
}

// register writes a plugin through node 3 and returns the write's index.
func (e *env) register(typ, name string) uint64 {
	e.t.Helper()
	return e.c.Register(e.c.Nodes[2], &api.PluginInfo{
		Type: typ, Name: name, AllocID: "a1", NodeID: "elsewhere", ConnectionInfo: &api.ConnectionInfo{Address: "10.0.0.1:1"},
	}).Index
}

// observe records every event of typ/name seen by node 2 from now on.
func (e *env) observe(typ, name string) func() []*api.Event {
	ctx, cancel := context.WithCancel(context.Background())
	ch, _, err := e.c.Nodes[1].Backend().Subscribe(ctx, []string{typ}, nil, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var mu sync.Mutex
	var got []*api.Event
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range ch {
			if ev.Info != nil && ev.Info.Name == name {
				mu.Lock()
				got = append(got, ev.Event)
				mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return func() []*api.Event {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// recorder is a plugin that records the events its handlers get.
type recorder struct {
	mu        sync.Mutex
	events    []*api.Event
	shutdowns int
	configs   []string
}

func (r *recorder) Configure(_ context.Context, cfg stub.Config) (stub.EventMask, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.configs = append(r.configs, fmt.Sprintf("%s reclaimed=%v", cfg.NodeID, cfg.Reclaimed))
	return 0, nil
}
func (r *recorder) add(ev *api.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	return nil
}
func (r *recorder) Registered(_ context.Context, ev *api.Event) error   { return r.add(ev) }
func (r *recorder) Updated(_ context.Context, ev *api.Event) error      { return r.add(ev) }
func (r *recorder) Deregistered(_ context.Context, ev *api.Event) error { return r.add(ev) }
func (r *recorder) Reset(_ context.Context, ev *api.Event) error        { return r.add(ev) }
func (r *recorder) Shutdown(context.Context) {
	r.mu.Lock()
	r.shutdowns++
	r.mu.Unlock()
}

func (r *recorder) got() []*api.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// indexes are the events' indexes.
func indexes(evs []*api.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Index
	}
	return out
}

// cutter is a dialer whose connections the test can cut, and whose new
// connections it can refuse.
type cutter struct {
	mu     sync.Mutex
	conns  []net.Conn
	refuse bool
	dials  int
}

func (c *cutter) dial(ctx context.Context, path string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dials++
	if c.refuse {
		return nil, errors.New("test: connection refused")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) cut(refuse bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse = refuse
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

func (c *cutter) allow() {
	c.mu.Lock()
	c.refuse = false
	c.mu.Unlock()
}

// describeEvents says what events are, for failure messages.
func describeEvents(evs []*api.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%d:%s", ev.Index, ev.EventType)
	}
	return out
}

// startStub starts a stub of type demo for plugin on the agent's socket;
// the test's end stops it.
func (e *env) startStub(plugin any, opts ...stub.Option) *stub.Stub {
	e.t.Helper()
	opts = append([]stub.Option{quiet, stub.WithSocketPath(e.path), stub.WithPluginType("demo")}, opts...)
	s, err := stub.New(plugin, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Stop)
	return s
}
