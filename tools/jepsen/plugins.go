package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/stub"
	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// stubPlugin is a plugin the harness runs, with package stub, on one
// agent's plugin socket (n1 and every client agent) for the whole run,
// while the nemesis kills, restarts, pauses and isolates that agent. Its
// events are recorded as sessions of subscriber id, as the slow watcher's
// are: one from the resume index it started with, and a new one at each
// reset. Where a reset may come is the agent's upstream's business, which
// the harness cannot see, so resets are allowed anywhere (journal size
// 0), but their contents, and every event, are checked exactly.
type stubPlugin struct {
	node  *node
	id    int
	clock func() int64
	stub  *stub.Stub
	ended chan struct{} // closed when Wait returned
	err   error         // Wait's, once ended

	mu       sync.Mutex // guards sessions, sess; the stub's handler goroutine records
	sessions []check.Session
	sess     check.Session
}

// The event handlers: every kind goes to record.
func (p *stubPlugin) Registered(_ context.Context, ev *api.Event) error   { return p.record(ev) }
func (p *stubPlugin) Updated(_ context.Context, ev *api.Event) error      { return p.record(ev) }
func (p *stubPlugin) Deregistered(_ context.Context, ev *api.Event) error { return p.record(ev) }
func (p *stubPlugin) Reset(_ context.Context, ev *api.Event) error        { return p.record(ev) }

func (p *stubPlugin) record(ev *api.Event) error {
	rec := eventRec(ev, p.clock())
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec.EventType == "reset" {
		// A new session, from where the previous one got to.
		reached := p.sess.From
		for _, e := range p.sess.Events {
			reached = max(reached, e.Index)
		}
		p.sess.End, p.sess.EndReason = rec.At, "reset"
		p.sessions = append(p.sessions, p.sess)
		p.sess = check.Session{Subscriber: p.id, Seq: p.sess.Seq + 1, Node: p.node.Name, Types: p.sess.Types, From: reached, Start: rec.At}
	}
	p.sess.Events = append(p.sess.Events, rec)
	return nil
}

// recorded ends the current session and returns them all.
func (p *stubPlugin) recorded() []check.Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sess.End, p.sess.EndReason = p.clock(), "stopped"
	return append(p.sessions, p.sess)
}

// stubName is every stub plugin's name: one recency list holds an
// instance of each node (the agent makes the AllocID from the node), so
// the leader's node-health mark of a client agent that went down changes
// an instance behind the list's front in place, and snapshots taken after
// it must hold that order (a snapshot check refused it once; see
// fsm.TestSnapshotAfterAHealthChangeBehindTheFront).
const stubName = "p"

func (p *stubPlugin) name() string { return stubName }

// stubPlugins are the run's stub plugins.
type stubPlugins struct {
	db    *db
	list  []*stubPlugin
	logf  func(string, ...interface{})
	types []string
}

// startStubPlugins starts one stub plugin on n1 and one on every client
// agent, subscribers firstID, firstID+1, ..., each with its events after
// the leader's applied index read just before it starts.
func startStubPlugins(ctx context.Context, d *db, clock func() int64, types, firstID int, logf func(string, ...interface{})) (*stubPlugins, error) {
	sp := &stubPlugins{db: d, logf: logf}
	for t := 0; t < types; t++ {
		sp.types = append(sp.types, fmt.Sprintf("t%d", t))
	}
	for k, n := range append([]*node{d.nodes[0]}, d.clients...) {
		p := &stubPlugin{node: n, id: firstID + k, clock: clock, ended: make(chan struct{})}
		from, err := d.appliedIndex(ctx)
		if err != nil {
			return sp, fmt.Errorf("stub plugin %s: resume index: %w", p.name(), err)
		}
		p.sess = check.Session{Subscriber: p.id, Node: n.Name, Types: sp.types, From: from, Start: clock()}
		log := slog.New(slog.NewTextHandler(logWriter(logf), &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: noTime}))
		p.stub, err = stub.New(p, stub.WithPluginType(check.StubPluginType), stub.WithPluginName(p.name()),
			stub.WithEndpoint("127.0.0.1:1"), stub.WithSocketPath(filepath.Join(n.Dir, "plugin.sock")),
			stub.WithEventMask(stub.AllEvents, sp.types...), stub.WithResumeIndex(from), stub.WithLogger(log))
		if err != nil {
			return sp, fmt.Errorf("stub plugin %s: %w", p.name(), err)
		}
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = p.stub.Start(sctx)
		cancel()
		if err != nil {
			return sp, fmt.Errorf("stub plugin %s on %s: start: %w", p.name(), n.Name, err)
		}
		go func() { p.err = p.stub.Wait(); close(p.ended) }()
		sp.list = append(sp.list, p)
		logf("stub plugin %s/%s (subscriber %d) on %s's plugin socket: events of %v after index %d", check.StubPluginType, p.name(), p.id, n.Name, sp.types, from)
	}
	return sp, nil
}

// appliedIndex is the leader's applied index.
func (d *db) appliedIndex(ctx context.Context) (uint64, error) {
	l, _ := d.leader(ctx)
	if l < 0 {
		return 0, fmt.Errorf("no leader")
	}
	h, err := d.health(ctx, l)
	if err != nil {
		return 0, err
	}
	return h.AppliedIndex, nil
}

// noTime drops slog's time: run.log's lines have theirs.
func noTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

// logWriter sends the stubs' log lines to run.log.
type logWriter func(string, ...interface{})

func (w logWriter) Write(b []byte) (int, error) {
	w("stub: %s", strings.TrimSpace(string(b)))
	return len(b), nil
}

// Bounds of the end-of-run checks. After Stop, a plugin must be gone
// sooner than the agent's grace period (-plugin-grace, 10s) would remove
// it: a Stop that left the removal to the grace period is a failure.
const (
	stubListedBound = 15 * time.Second // time for a stub still in backoff to come back
	stubGoneBound   = 6 * time.Second
)

// checkRegistered: after the heal, every stub is still running, its
// stream has reached target (every node's applied index; 0 when a node
// was stuck, which the cluster's checks report), and it is listed exactly
// once on every server (each its own replica), with its agent's node. The
// events checker checks what a stub received only as a prefix of the log:
// a stream that stopped without a gap shows here. It polls up to
// stubListedBound: a stub whose agent just restarted may be between
// reconnects, and only heartbeats move its position past its types' last
// event.
func (sp *stubPlugins) checkRegistered(ctx context.Context, target uint64) []check.Violation {
	var vs []check.Violation
	deadline := time.Now().Add(stubListedBound)
	for {
		vs = vs[:0]
		for _, p := range sp.list {
			select {
			case <-p.ended:
				vs = append(vs, violation("plugins", "%s on %s: the stub stopped during the run: %v", p.name(), p.node.Name, p.err))
				continue
			default:
			}
			if at := p.stub.Position().Complete; at < target {
				vs = append(vs, violation("plugins", "%s on %s: its events reached index %d, every server had applied %d", p.name(), p.node.Name, at, target))
			}
			for _, n := range sp.db.nodes {
				ps, err := stubInstances(ctx, sp.db, n, p.node.Name)
				switch {
				case err != nil:
					vs = append(vs, violation("plugins", "%s on %s: listing on %s: %v", p.name(), p.node.Name, n.Name, err))
				case len(ps) != 1:
					vs = append(vs, violation("plugins", "%s on %s: %s lists %d instances of it, want 1: %s", p.name(), p.node.Name, n.Name, len(ps), renderInstances(ps)))
				case ps[0].Options[api.OptionSource] != api.SourceStub:
					vs = append(vs, violation("plugins", "%s on %s: %s lists it with source %q", p.name(), p.node.Name, n.Name, ps[0].Options[api.OptionSource]))
				}
			}
		}
		if len(vs) == 0 || time.Now().After(deadline) {
			return vs
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop stops every stub (Stop deregisters), records their sessions and
// checks that every server forgets them within stubGoneBound.
func (sp *stubPlugins) stop(ctx context.Context, rec *recorder) []check.Violation {
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, p := range sp.list {
		wg.Add(1)
		go func() { defer wg.Done(); p.stub.Stop() }()
	}
	wg.Wait()
	took := time.Since(t0)
	events := 0
	for _, p := range sp.list {
		ss := p.recorded()
		for _, s := range ss {
			events += len(s.Events)
		}
		rec.mu.Lock()
		rec.stubSessions = append(rec.stubSessions, ss...)
		rec.mu.Unlock()
	}
	var vs []check.Violation
	for {
		vs = vs[:0]
		for _, p := range sp.list {
			for _, n := range sp.db.nodes {
				if ps, err := stubInstances(ctx, sp.db, n, p.node.Name); err != nil || len(ps) > 0 {
					vs = append(vs, violation("plugins", "%s on %s: still listed on %s %v after Stop (%s %v)", p.name(), p.node.Name, n.Name, stubGoneBound, renderInstances(ps), err))
				}
			}
		}
		if len(vs) == 0 || time.Since(t0) > stubGoneBound {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sp.logf("stub plugins: stopped in %v (%d events received); gone from every server after %v: %v",
		took.Round(time.Millisecond), events, time.Since(t0).Round(time.Millisecond), len(vs) == 0)
	return vs
}

// stubInstances is every instance of jplugin/name in server n's own
// replica (a stale read).
// stubInstances lists, as n has them, the stub plugin instances of node
// owner.
func stubInstances(ctx context.Context, d *db, n *node, owner string) ([]api.PluginInfo, error) {
	var all, ps []api.PluginInfo
	_, err := staleRead(ctx, d, n.HTTP, "/v1/plugins/"+check.StubPluginType+"/"+stubName, &all) // 404: none
	for _, p := range all {
		if p.NodeID == owner {
			ps = append(ps, p)
		}
	}
	return ps, err
}

func renderInstances(ps []api.PluginInfo) string {
	var b []string
	for _, p := range ps {
		b = append(b, fmt.Sprintf("%s@%s(modify %d)", p.AllocID, p.NodeID, p.ModifyIndex))
	}
	return "[" + strings.Join(b, " ") + "]"
}

func violation(checker, format string, args ...interface{}) check.Violation {
	return check.Violation{Checker: checker, Detail: fmt.Sprintf(format, args...)}
}
