//go:build linux

package stub_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/stub"
	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// The plugin SDK with real processes and sockets: three `plugreg agent`
// servers and one client agent (-client -plugin-socket), built from this
// repository, and plugins that are processes of examples/stub-plugin
// connected to the client agent's plugin socket. Each server's own replica
// is read (stale reads) and watched through the Go client.

const (
	hostNode = "host-1"
	// grace is the client agent's -plugin-grace: short, so that the tests
	// that wait it out are quick; long enough for a killed plugin process
	// to be started again within it.
	grace = 3 * time.Second
	// reapAfter is the servers' -node-reap-after. The client agent killed
	// with -9 and restarted must be back before its node is reaped (its
	// plugins would be deregistered: events): longer than a restart.
	reapAfter = 10 * time.Second
)

// procEnv is the processes under test.
type procEnv struct {
	*proctest.Cluster
	host   *proctest.Agent // the client agent the plugins connect to
	sock   string          // its -plugin-socket
	plugin string          // the examples/stub-plugin binary
	seq    atomic.Int64    // numbers plugin logs and barrier writes
}

// TestProcesses starts the agents once (that takes a while with -race)
// and runs the tests on them; each uses plugin types of its own. When it
// ends, every agent must exit with status 0 within proctest.StopBound of
// SIGTERM, and no agent or plugin process may have exited without the
// test asking (proctest.StartCluster's checks).
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds plugreg and runs agent and plugin processes")
	}
	// Short: the plugin socket's path is at most 107 bytes, and the
	// servers' default sockets (DATA-DIR/plugin.sock) are under it too.
	dir, err := os.MkdirTemp("", "stp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // runs after the cluster's: registered before it
	e := &procEnv{sock: filepath.Join(dir, "plugin.sock"), plugin: proctest.Build(t, "./examples/stub-plugin")}
	e.Cluster = proctest.StartCluster(t, proctest.ClusterConfig{Dir: dir,
		ServerArgs: []string{"-raft-multiplier", "1", "-node-reap-after", reapAfter.String()}})
	e.host = e.StartClient(t, hostNode, "127.0.0.1", "-plugin-socket", e.sock, "-plugin-grace", grace.String())
	e.WaitReady(t)

	t.Run("Kill9DeregisteredAfterGrace", e.testKill9)
	t.Run("RestartWithinGraceNoEvents", e.testRestartWithinGrace)
	t.Run("AgentRestart", e.testAgentRestart)
	t.Run("BadInput", e.testBadInput)
}

// plugin says how to start a stub-plugin process: it registers typ/name
// idx on the client agent and logs the events of type watch.
type plugin struct {
	typ, name, idx, watch string
	env                   []string // more environment
}

// startPlugins starts the plugins. t's cleanup stops those still running
// with SIGTERM (an orderly stop: deregistered), all at once (a -race
// binary sleeps a second before it exits); each must exit with status 0.
func (e *procEnv) startPlugins(t *testing.T, specs ...plugin) []*proctest.Proc {
	t.Helper()
	var ps []*proctest.Proc
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, p := range ps {
			if p.Exited() { // the test's to check (or a crash, reported at the end)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if took, ok := p.Stop(t); ok && p.State().ExitCode() != 0 {
					t.Errorf("%s exited with %s %v after SIGTERM; want 0. Its log:\n%s", p.Name, p.State(), took, proctest.LogTail(p.LogPath, 30))
				}
			}()
		}
		wg.Wait()
	})
	for _, sp := range specs {
		p := proctest.New(fmt.Sprintf("plugin %s/%s idx %s", sp.typ, sp.name, sp.idx), e.plugin,
			filepath.Join(e.Dir, fmt.Sprintf("plugin-%d-%s-%s-%s.log", e.seq.Add(1), sp.typ, sp.name, sp.idx)),
			"-type", sp.typ, "-name", sp.name, "-idx", sp.idx, "-endpoint", "/run/"+sp.name+".sock", "-watch", sp.watch)
		p.Env = append([]string{stub.SocketPathEnv + "=" + e.sock}, sp.env...)
		e.Track(p)
		p.Start(t)
		ps = append(ps, p)
	}
	return ps
}

// A plugin's stdout: one line per (re)connection, one per event.
var (
	configuredLine = regexp.MustCompile(`configured: node=(\S*) alloc=(\S*) reclaimed=(true|false)`)
	eventLine      = regexp.MustCompile(`event index=(\d+) kind=(\w+) plugin=([^/\s]+)/(\S+) alloc=(\S*) node=(\S*)`)
)

type configured struct {
	node, alloc string
	reclaimed   bool
}

// configurations returns the plugin's configured: lines, of every run.
func configurations(p *proctest.Proc) []configured {
	var out []configured
	for _, m := range configuredLine.FindAllStringSubmatch(p.Log(), -1) {
		out = append(out, configured{m[1], m[2], m[3] == "true"})
	}
	return out
}

type logged struct {
	index           uint64
	kind, typ, name string
}

// loggedEvents returns the plugin's event lines of type typ.
func loggedEvents(p *proctest.Proc, typ string) []logged {
	var out []logged
	for _, m := range eventLine.FindAllStringSubmatch(p.Log(), -1) {
		if m[3] != typ {
			continue
		}
		i, _ := strconv.ParseUint(m[1], 10, 64)
		out = append(out, logged{i, m[2], m[3], m[4]})
	}
	return out
}

// instances returns typ/name's instances on s's own replica.
func instances(s *proctest.Agent, typ, name string) ([]*api.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, _, err := s.API.Instances(ctx, typ, name, &client.QueryOptions{Stale: true})
	if errors.Is(err, api.ErrNotFound) {
		return nil, nil
	}
	return l, err
}

// hostPlugins returns the client agent's node's instances of typ on s's
// own replica, by name.
func hostPlugins(s *proctest.Agent, typ string) (map[string][]*api.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, _, err := s.API.NodePlugins(ctx, hostNode, &client.QueryOptions{Stale: true})
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		return nil, err
	}
	out := map[string][]*api.PluginInfo{}
	for _, p := range l {
		if p.Type == typ {
			out[p.Name] = append(out[p.Name], p)
		}
	}
	return out, nil
}

// checkOne says what is wrong with typ/name's instances on s, or "": one
// instance, the client agent's, and if want is set, want's very entry.
func checkOne(s *proctest.Agent, typ, name string, want *api.PluginInfo) string {
	l, err := instances(s, typ, name)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", s.Name, err)
	case len(l) != 1:
		return fmt.Sprintf("%s lists %d instances of %s/%s: %s", s.Name, len(l), typ, name, describe(l))
	case l[0].NodeID != hostNode:
		return fmt.Sprintf("%s lists %s/%s on node %q", s.Name, typ, name, l[0].NodeID)
	case want != nil && (l[0].AllocID != want.AllocID || l[0].ModifyIndex != want.ModifyIndex):
		return fmt.Sprintf("%s lists %s/%s as %s; it was %s", s.Name, typ, name, describe(l), describe([]*api.PluginInfo{want}))
	}
	return ""
}

func describe(l []*api.PluginInfo) string {
	var s []string
	for _, p := range l {
		s = append(s, fmt.Sprintf("{alloc %s node %s index %d}", p.AllocID, p.NodeID, p.ModifyIndex))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// waitListed waits until every server's replica lists typ/name once, as
// the client agent's, and returns the entry (the same on every server).
func (e *procEnv) waitListed(t *testing.T, typ, name string) *api.PluginInfo {
	t.Helper()
	e.Poll(t, fmt.Sprintf("%s/%s listed once by every server", typ, name), func() (bool, string) {
		for _, s := range e.Servers {
			if msg := checkOne(s, typ, name, nil); msg != "" {
				return false, msg
			}
		}
		return true, ""
	})
	l, err := instances(e.Servers[0], typ, name)
	if err != nil || len(l) != 1 {
		t.Fatalf("%s/%s: %v %v", typ, name, describe(l), err)
	}
	for _, s := range e.Servers[1:] {
		e.Poll(t, fmt.Sprintf("%s/%s the same on every server", typ, name), func() (bool, string) {
			msg := checkOne(s, typ, name, l[0])
			return msg == "", msg
		})
	}
	return l[0]
}

// arrival is an event and when the test got it.
type arrival struct {
	ev *api.Event
	at time.Time
}

// watchLog is a Go client Watch on one server, recorded.
type watchLog struct {
	mu  sync.Mutex
	got []arrival
}

// watch records the events of types after from, as server s streams them,
// until t ends.
func (e *procEnv) watch(t *testing.T, s *proctest.Agent, from uint64, types ...string) *watchLog {
	ctx, cancel := context.WithCancel(context.Background())
	ch := s.API.Stream(ctx, from, client.WatchOptions{Types: types}).Events()
	w := &watchLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range ch {
			w.mu.Lock()
			w.got = append(w.got, arrival{ev, time.Now()})
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// of returns the events recorded for typ/name (a reset counts: it may
// hide anything).
func (w *watchLog) of(typ, name string) []arrival {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []arrival
	for _, a := range w.got {
		if a.ev.EventType == api.EventReset || a.ev.Info != nil && a.ev.Info.Type == typ && a.ev.Info.Name == name {
			out = append(out, a)
		}
	}
	return out
}

func (w *watchLog) seen(index uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got) > 0 && w.got[len(w.got)-1].ev.Index >= index
}

func kinds(as []arrival) string {
	var s []string
	for _, a := range as {
		n := ""
		if a.ev.Info != nil {
			n = a.ev.Info.Type + "/" + a.ev.Info.Name
		}
		s = append(s, fmt.Sprintf("%s %s at index %d", a.ev.EventType, n, a.ev.Index))
	}
	return "[" + strings.Join(s, "; ") + "]"
}

// register writes an instance of typ/name on another node through server
// s and returns the write's index.
func register(s *proctest.Agent, typ, name string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.API.Register(ctx, &api.PluginInfo{Type: typ, Name: name, AllocID: "a1", NodeID: "elsewhere",
		ConnectionInfo: &api.ConnectionInfo{Address: "10.0.0.1:1"}})
	return res.Index, err
}

// barrier writes an event of typ and waits until w has it: w has then
// every event of typ written before.
func (e *procEnv) barrier(t *testing.T, w *watchLog, typ string) {
	t.Helper()
	index, err := register(e.Servers[1], typ, fmt.Sprintf("barrier-%d", e.seq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	e.Poll(t, "the watch reaching the barrier write", func() (bool, string) {
		return w.seen(index), fmt.Sprintf("index %d not seen", index)
	})
}

// A plugin killed with -9 cannot say Stop: the agent keeps it registered
// for its grace period (on every server), then deregisters it.
func (e *procEnv) testKill9(t *testing.T) {
	const typ, name = "k9", "victim"
	p := e.startPlugins(t, plugin{typ, name, "00", typ, nil})[0]
	info := e.waitListed(t, typ, name)
	w := e.watch(t, e.Servers[0], info.ModifyIndex, typ)

	killed := p.Kill9(t)
	// Listed everywhere until the grace period has passed; gone after it.
	// A read that answers before killed+grace shows what was applied
	// before then (timers never fire early): it must list the plugin.
	var lastListed time.Duration
	took := e.Poll(t, "the killed plugin gone from every server", func() (bool, string) {
		gone := 0
		for _, s := range e.Servers {
			l, err := instances(s, typ, name)
			answered := time.Since(killed)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", s.Name, err)
			}
			if len(l) > 0 {
				lastListed = max(lastListed, answered)
				continue
			}
			if answered < grace {
				t.Fatalf("%s no longer lists the plugin %v after kill -9, before the grace period (%v)", s.Name, answered, grace)
			}
			gone++
		}
		return gone == len(e.Servers), fmt.Sprintf("%d of %d servers dropped it", gone, len(e.Servers))
	})
	if lastListed == 0 {
		t.Fatal("no server was seen listing the plugin after the kill")
	}
	e.Poll(t, "the deregistered event", func() (bool, string) {
		evs := w.of(typ, name)
		return len(evs) > 0, kinds(evs)
	})
	evs := w.of(typ, name)
	if len(evs) != 1 || evs[0].ev.EventType != api.EventDeregistered || evs[0].ev.Info.AllocID != info.AllocID {
		t.Fatalf("events for the killed plugin: %s; want one deregistered of alloc %s", kinds(evs), info.AllocID)
	}
	if after := evs[0].at.Sub(killed); after < grace {
		t.Fatalf("the deregistered event arrived %v after kill -9, before the grace period (%v)", after, grace)
	}
	t.Logf("kill -9: listed until %v after the kill, gone everywhere %v after it, deregistered event %v after it (grace %v)",
		lastListed.Round(time.Millisecond), took.Round(time.Millisecond), evs[0].at.Sub(killed).Round(time.Millisecond), grace)
}

// A plugin killed with -9 and started again within the grace period takes
// its registration over: no registry write, so no event at all, and the
// same entry on every server.
func (e *procEnv) testRestartWithinGrace(t *testing.T) {
	const typ, name = "rs", "phoenix"
	p := e.startPlugins(t, plugin{typ, name, "00", typ, nil})[0]
	info := e.waitListed(t, typ, name)
	if c := configurations(p); len(c) != 1 || c[0].reclaimed || c[0].alloc != info.AllocID || c[0].node != hostNode {
		t.Fatalf("first run's configured lines %+v; want one, not reclaimed, alloc %s on %s", c, info.AllocID, hostNode)
	}
	w := e.watch(t, e.Servers[1], info.ModifyIndex, typ)

	killed := p.Kill9(t)
	p.Start(t)
	e.Poll(t, "the restarted plugin configured", func() (bool, string) {
		return len(configurations(p)) == 2, fmt.Sprint(configurations(p))
	})
	reconnected := time.Since(killed)
	if c := configurations(p)[1]; !c.reclaimed || c.alloc != info.AllocID {
		t.Fatalf("restarted %v after kill -9 (grace %v): configured %+v; want reclaimed, alloc %s", reconnected, grace, c, info.AllocID)
	}
	// Wait the grace period out (a grace timer left running would fire by
	// then), then read everything the watch has up to now.
	time.Sleep(time.Until(killed.Add(grace + time.Second)))
	e.barrier(t, w, typ)
	if evs := w.of(typ, name); len(evs) > 0 {
		t.Fatalf("events for the plugin across kill -9 and a restart within grace: %s; want none", kinds(evs))
	}
	for _, s := range e.Servers {
		if msg := checkOne(s, typ, name, info); msg != "" {
			t.Fatal(msg)
		}
	}
	t.Logf("restart within grace: configured again (reclaimed) %v after kill -9; no event, same entry everywhere", reconnected.Round(time.Millisecond))
}

// The client agent restarted (SIGTERM, or kill -9 and a restart within
// its grace period): every plugin reconnects and is registered once, as
// it was (no event for any of them), and a plugin watching a type gets
// every event written before, during and after the restart, once each.
func (e *procEnv) testAgentRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill bool
	}{
		{"SIGTERM", false},
		// Restarted within the grace period and before the servers reap
		// the node (reapAfter).
		{"Kill9", true},
	} {
		t.Run(tc.name, func(t *testing.T) { e.agentRestart(t, strings.ToLower(tc.name), tc.kill) })
	}
}

func (e *procEnv) agentRestart(t *testing.T, typ string, kill bool) {
	const n = 20
	watched := typ + "-w" // written to throughout; plugin 0 logs it
	var specs []plugin
	var names []string
	for i := range n {
		watch := typ
		if i == 0 {
			watch = watched
		}
		names = append(names, fmt.Sprintf("p%02d", i))
		specs = append(specs, plugin{typ, names[i], "00", watch, nil})
	}
	ps := e.startPlugins(t, specs...)
	// Every one listed once on every server: what it must stay.
	before := map[string]*api.PluginInfo{}
	e.Poll(t, fmt.Sprintf("the %d plugins listed once by every server", n), func() (bool, string) {
		for _, s := range e.Servers {
			m, err := hostPlugins(s, typ)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", s.Name, err)
			}
			if msg := checkPlugins(m, n, nil); msg != "" {
				return false, s.Name + ": " + msg
			}
			for name, l := range m {
				before[name] = l[0]
			}
		}
		return true, ""
	})
	for _, s := range e.Servers { // the same entries on every replica
		e.Poll(t, "the same entries on every server", func() (bool, string) {
			m, err := hostPlugins(s, typ)
			if err != nil {
				return false, err.Error()
			}
			msg := checkPlugins(m, n, before)
			return msg == "", s.Name + ": " + msg
		})
	}
	var from uint64
	for _, p := range before {
		from = max(from, p.ModifyIndex)
	}
	w := e.watch(t, e.Servers[2], from, typ)

	// Writes of the watched type, through the servers, until told to stop.
	var (
		mu     sync.Mutex
		wrote  []uint64
		errs   []error
		stop   = make(chan struct{})
		writer = make(chan struct{})
	)
	go func() {
		defer close(writer)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			index, err := register(e.Servers[i%len(e.Servers)], watched, fmt.Sprintf("w%d", i))
			mu.Lock()
			if err != nil {
				errs = append(errs, err)
			} else {
				wrote = append(wrote, index)
			}
			mu.Unlock()
		}
	}()
	stopWriting := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-writer
	}
	defer stopWriting()
	written := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(wrote)
	}
	e.Poll(t, "the watching plugin getting the writes", func() (bool, string) {
		return len(loggedEvents(ps[0], watched)) >= 5, fmt.Sprintf("%d logged", len(loggedEvents(ps[0], watched)))
	})

	// The restart.
	stopped := time.Now()
	if kill {
		e.host.Kill9(t)
	} else {
		took, ok := e.host.Stop(t)
		if !ok {
			t.FailNow()
		}
		if st := e.host.State(); st.ExitCode() != 0 {
			t.Fatalf("the client agent exited with %s after SIGTERM; want 0", st)
		}
		t.Logf("the client agent exited %v after SIGTERM", took.Round(time.Millisecond))
	}
	e.host.Start(t)
	atRestart := written()
	e.Poll(t, "every plugin configured again", func() (bool, string) {
		for _, p := range ps {
			if c := configurations(p); len(c) < 2 {
				return false, fmt.Sprintf("%s: %d configured lines", p.Name, len(c))
			}
		}
		return true, ""
	})
	reconnected := time.Since(stopped)
	for i, p := range ps {
		if c := configurations(p); len(c) != 2 || c[1].alloc != before[names[i]].AllocID {
			t.Errorf("%s: configured lines %+v; want two, the same alloc", p.Name, c)
		}
	}
	// Writes after every plugin is back too, then the last one delivered.
	e.Poll(t, "writes after the plugins are back", func() (bool, string) {
		return written() >= atRestart+20, fmt.Sprintf("%d writes", written())
	})
	stopWriting()
	mu.Lock()
	want, werrs := slices.Clone(wrote), slices.Clone(errs)
	mu.Unlock()
	if len(werrs) > 0 {
		t.Fatalf("writes failed: %v", werrs)
	}
	e.Poll(t, "the watching plugin logging the last write", func() (bool, string) {
		l := loggedEvents(ps[0], watched)
		return len(l) > 0 && l[len(l)-1].index >= want[len(want)-1], fmt.Sprintf("%d of %d logged", len(l), len(want))
	})
	var got []uint64
	for _, l := range loggedEvents(ps[0], watched) {
		if l.kind != string(api.EventRegistered) {
			t.Errorf("watching plugin logged %+v", l)
		}
		got = append(got, l.index)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the watching plugin logged the indexes %v; the writes returned %v (a gap or a duplicate)", got, want)
	}

	// Past the restarted agent's return window, after which its
	// anti-entropy removes the plugins that had not come back (it says so
	// in its log; a second for the round it starts): nothing may have
	// been written for any of them, before or since.
	e.Poll(t, "the restarted agent's return window over", func() (bool, string) {
		return strings.Contains(lastRun(e.host.Proc), windowOver), "not yet logged: " + windowOver
	})
	time.Sleep(time.Second)
	e.barrier(t, w, typ)
	for _, name := range names {
		if evs := w.of(typ, name); len(evs) > 0 {
			t.Errorf("events for %s across the agent's restart: %s; want none (the plugins were back %v after the agent stopped; the servers reap a node dead for %v)",
				name, kinds(evs), reconnected.Round(time.Millisecond), reapAfter)
		}
	}
	for _, s := range e.Servers {
		m, err := hostPlugins(s, typ)
		if err != nil {
			t.Fatal(err)
		}
		if msg := checkPlugins(m, n, before); msg != "" {
			t.Errorf("after the restart, %s: %s", s.Name, msg)
		}
	}
	t.Logf("agent restart: %d plugins configured again %v after the agent stopped; %d writes, %d of them after the restart",
		n, reconnected.Round(time.Millisecond), len(want), len(want)-atRestart)
}

// windowOver is what an agent logs when its plugins have had their time
// to come back after its start (agent.StartServices).
const windowOver = "plugins had their time to come back after the start"

// lastRun is the log of p's last run.
func lastRun(p *proctest.Proc) string {
	l := p.Log()
	return l[max(strings.LastIndex(l, "=== test: start "), 0):]
}

// checkPlugins says what is wrong with the host's instances by name, or
// "": n plugins p00..., one instance each, and if want is set, its very
// entries.
func checkPlugins(m map[string][]*api.PluginInfo, n int, want map[string]*api.PluginInfo) string {
	if len(m) != n {
		return fmt.Sprintf("%d of %d plugins listed", len(m), n)
	}
	for i := range n {
		name := fmt.Sprintf("p%02d", i)
		l := m[name]
		if len(l) != 1 {
			return fmt.Sprintf("%s listed %d times: %s", name, len(l), describe(l))
		}
		if w := want[name]; w != nil && (l[0].AllocID != w.AllocID || l[0].ModifyIndex != w.ModifyIndex) {
			return fmt.Sprintf("%s listed as %s; it was %s", name, describe(l), describe([]*api.PluginInfo{w}))
		}
	}
	return ""
}

// Plugins that cannot register exit with a status that says so and a
// message that says why; nothing is registered for them.
func (e *procEnv) testBadInput(t *testing.T) {
	const typ = "bad"
	running := e.startPlugins(t, plugin{typ, "dup", "00", typ, nil})[0]
	info := e.waitListed(t, typ, "dup")
	// In a group: the parallel cases end before the checks below.
	t.Run("Cases", func(t *testing.T) { e.badInputCases(t, typ) })
	// Nothing extra registered: the running plugin, as it was, alone.
	for _, s := range e.Servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l, _, err := s.API.List(ctx, typ, &client.QueryOptions{Stale: true})
		cancel()
		if err != nil || len(l) != 1 {
			t.Errorf("%s lists %s: %s, %v; want the running plugin only", s.Name, typ, describe(l), err)
		}
		if msg := checkOne(s, typ, "dup", info); msg != "" {
			t.Error(msg)
		}
	}
	if running.Exited() {
		t.Errorf("the running plugin exited: %s", running.State())
	}
}

func (e *procEnv) badInputCases(t *testing.T, typ string) {
	for _, tc := range []struct {
		name, plugin, idx string
		env               []string
		want              []string // in its output
	}{
		{name: "NoSocket", plugin: "nosock", idx: "00", env: []string{stub.SocketPathEnv + "=" + filepath.Join(e.Dir, "none.sock")},
			want: []string{"no plugin socket at " + filepath.Join(e.Dir, "none.sock")}},
		{name: "InvalidIdx", plugin: "badidx", idx: "7", want: []string{`idx "7"`, "not two digits"}},
		// The agent refuses a second session of a connected plugin.
		{name: "Duplicate", plugin: "dup", idx: "00", want: []string{"connected in another session"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the no-socket case retries for the registration timeout
			p := e.startPlugins(t, plugin{typ, tc.plugin, tc.idx, typ, tc.env})[0]
			st := p.WaitExit(t, proctest.Wait)
			out := p.Log()
			if st.ExitCode() <= 0 {
				t.Errorf("%s exited with %s; want a failure", p.Name, st)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s's output does not say %q:\n%s", p.Name, w, out)
				}
			}
		})
	}
}
