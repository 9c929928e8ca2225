package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/plugreg/plugreg/tools/jepsen/check"
)

type logger struct {
	mu sync.Mutex // guards f
	f  *os.File
}

func newLog(path string) *logger {
	f, _ := os.Create(path)
	return &logger{f: f}
}

func (l *logger) printf(format string, args ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := fmt.Sprintf("%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	os.Stderr.WriteString(line)
	if l.f != nil {
		l.f.WriteString(line)
	}
}

func (l *logger) close() {
	if l.f != nil {
		l.f.Close()
	}
}

// convergence is what the nodes reported after the final heal.
type convergence struct {
	violations []check.Violation
	index      uint64
	lists      map[string][]check.Item // type -> the list every node agreed on
}

// endOfRun is what the harness found after the final heal.
type endOfRun struct {
	live         liveness
	conv         convergence
	stuck        []check.Violation // catch-up failures after faults
	stops        []stopped         // the SIGTERMs
	watchTarget  uint64            // the index the slow watcher had to reach
	watchReached uint64
	watchState   string            // where the slow watcher stood, when it did not catch up
	plugins      []check.Violation // the stub plugins' registrations (stubPlugins)
	logMarks     string            // what the servers' logs say happened to their Raft logs (raftLogMarks)
}

// converge waits up to bound until every node reports the same applied
// index, then compares every type's list across the nodes (stale reads:
// each node's own state).
func converge(ctx context.Context, d *db, types []string, bound time.Duration, logf func(string, ...interface{})) convergence {
	var c convergence
	deadline := time.Now().Add(bound)
	var idx []uint64
	for time.Now().Before(deadline) {
		idx = idx[:0]
		for i := range d.nodes {
			if h, err := d.health(ctx, i); err == nil {
				idx = append(idx, h.AppliedIndex)
			}
		}
		if len(idx) == len(d.nodes) && idx[0] == idx[1] && idx[1] == idx[2] {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(idx) != len(d.nodes) || idx[0] != idx[1] || idx[1] != idx[2] {
		c.violations = append(c.violations, check.Violation{Checker: "convergence", Detail: fmt.Sprintf("applied indexes did not converge within %v: %v", bound, idx)})
		return c
	}
	c.index = idx[0]
	c.lists = map[string][]check.Item{}
	for _, typ := range types {
		var first string
		for i, n := range d.nodes {
			items, err := staleList(ctx, d, n.HTTP, typ)
			if err != nil {
				c.violations = append(c.violations, check.Violation{Checker: "convergence", Detail: fmt.Sprintf("list %s on %s: %v", typ, n.Name, err)})
				continue
			}
			b, _ := json.Marshal(items)
			if i == 0 {
				first, c.lists[typ] = string(b), items
			} else if string(b) != first {
				c.violations = append(c.violations, check.Violation{Checker: "convergence", Detail: fmt.Sprintf("%s: %s lists %s, %s lists %s", typ, n.Name, b, d.nodes[0].Name, first)})
			}
		}
	}
	logf("converged at index %d", c.index)
	return c
}

func staleList(ctx context.Context, d *db, addr, typ string) ([]check.Item, error) {
	var ps []struct{ Name, AllocID, Version string }
	if found, err := staleRead(ctx, d, addr, "/v1/plugins/"+typ, &ps); err != nil || !found {
		return nil, errors.Join(err, errNotFound(found, typ))
	}
	items := []check.Item{}
	for _, p := range ps {
		items = append(items, check.Item{Name: p.Name, Alloc: p.AllocID, Value: p.Version})
	}
	return items, nil
}

// staleRead GETs path from the node at addr (host:port) with
// consistency=stale, its own replica, into out. A 404 is found false.
func staleRead(ctx context.Context, d *db, addr, path string, out any) (found bool, err error) {
	u := "http://" + addr + path + "?consistency=stale"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return false, nil
	default:
		return false, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return false, fmt.Errorf("GET %s: %w", u, err)
	}
	return true, nil
}

// errNotFound is an error for a read that had to find something.
func errNotFound(found bool, what string) error {
	if found {
		return nil
	}
	return fmt.Errorf("%s: not found", what)
}

// result is the verdict of a run.
type result struct {
	violations []check.Violation
	invalid    string
	summary    string
	vis        []byte
}

func analyse(dir string, r *runConfig, d *db, rec *recorder, faults []fault, end endOfRun, logf func(string, ...interface{})) *result {
	conv := end.conv
	res := &result{}
	journals := map[string][]check.ApplyRecord{}
	for _, n := range d.nodes {
		recs, err := check.ReadJSONL[check.ApplyRecord](n.Journal)
		if err != nil {
			res.violations = append(res.violations, check.Violation{Checker: "ground-truth", Detail: err.Error()})
		}
		journals[n.Name] = recs
	}
	truth, vs := check.Merge(journals)
	// A client agent has no journal and no snapshot of its own: its
	// streams come from whichever server its fan-out follows, so a reset
	// through it is explained by a restore on any server.
	for _, c := range d.clients {
		for _, n := range d.nodes {
			truth.Restores[c.Name] = append(truth.Restores[c.Name], truth.Restores[n.Name]...)
		}
	}
	add := func(name string, vs []check.Violation) {
		logf("checker %-14s %d violations", name, len(vs))
		res.violations = append(res.violations, vs...)
	}
	add("ground-truth", vs)
	add("writes", check.Writes(rec.ops, truth))
	add("reads", check.ReadsAtIndex(rec.ops, truth))
	add("events", check.Events(rec.sessions, truth, r.journalSize))
	// A stub's resets come from its agent's upstream, which the harness
	// cannot see: allowed anywhere (journal size 0), contents checked.
	add("plugin-events", check.Events(rec.stubSessions, truth, 0))
	add("leaders", check.Leaders(rec.leaders))
	add("isolated", cutOffAnswers(rec.ops, faults))
	add("convergence", conv.violations)
	// The converged lists must be the ground truth's final state.
	if conv.lists != nil {
		final := truth.StateAt(conv.index)
		var cv []check.Violation
		for typ, items := range conv.lists {
			want, _ := json.Marshal(nonNil(final.List(typ)))
			got, _ := json.Marshal(items)
			if string(want) != string(got) {
				cv = append(cv, check.Violation{Checker: "convergence", Detail: fmt.Sprintf("%s: the nodes agree on %s, the log says %s", typ, got, want)})
			}
		}
		add("final-state", cv)
	}
	// Availability: the agents stayed up, caught up after every fault, took
	// writes after the final heal, and stopped on SIGTERM; the slow watcher
	// reached the end.
	add("agent", agentFailures(d))
	add("catch-up", end.stuck)
	add("liveness", end.live.violations)
	add("shutdown", shutdownViolations(end.stops))
	add("watch", watchCatchUp(r, end))
	add("plugins", end.plugins)
	leaseVs, leaseStats := check.Leases(rec.leases, rec.sessions, truth, conv.index)
	add("leases", leaseVs)
	var anns []porcupine.Annotation
	for _, f := range faults {
		anns = append(anns, porcupine.Annotation{Tag: "nemesis", Start: f.Start, End: f.End, Description: f.Name, Details: f.Detail, BackgroundColor: "#ffd6d6"})
	}
	var vis strings.Builder
	t0 := time.Now()
	add("linearizable", check.Linearizable(rec.ops, r.checkTimeout, anns, &vis))
	logf("porcupine took %v", time.Since(t0).Round(time.Millisecond))
	res.vis = []byte(vis.String())

	// Validity: faults took effect, and the cluster did work before them.
	effective := 0
	for _, f := range faults {
		if f.Effect {
			effective++
		}
	}
	firstFault := int64(r.timeLimit)
	if len(faults) > 0 {
		firstFault = faults[0].Start
	}
	okBefore := 0
	for _, op := range rec.ops {
		if op.Outcome == check.OK && op.End < firstFault {
			okBefore++
		}
	}
	tput := float64(okBefore) / (float64(firstFault) / 1e9)
	switch {
	case len(r.nemesis) > 0 && effective == 0:
		res.invalid = "no fault took effect"
	case tput < r.minThroughput:
		res.invalid = fmt.Sprintf("throughput before the first fault was %.1f ok ops/s, under the floor of %.1f", tput, r.minThroughput)
	}
	end.logMarks = raftLogMarks(d)
	res.summary = summarize(r, rec, faults, res, truth, tput, end, leaseStats)
	return res
}

// cutOffAnswers: while a client agent is cut off from every server
// (isolate-client), nothing it answers can come from one. An operation
// through it that began after the cut was in place, ended before the heal,
// and was answered ok is a write acknowledged without being sent or a read
// served from nowhere.
func cutOffAnswers(ops []check.Op, faults []fault) []check.Violation {
	var vs []check.Violation
	for _, f := range faults {
		if f.Cut == "" || f.CutTo == 0 {
			continue
		}
		n := 0
		for _, op := range ops {
			if op.Node != f.Cut || op.Start < f.CutFrom || op.End > f.CutTo {
				continue
			}
			n++
			if op.Outcome == check.OK {
				vs = append(vs, check.Violation{Checker: "isolated", Detail: fmt.Sprintf("op %d: %s %s/%s/%s through %s answered ok (index %d) at %.3fs-%.3fs while %s was cut off from every server (%.3fs-%.3fs)",
					op.ID, op.F, op.Type, op.Name, op.Alloc, op.Node, op.Index, float64(op.Start)/1e9, float64(op.End)/1e9, f.Cut, float64(f.CutFrom)/1e9, float64(f.CutTo)/1e9)})
			}
		}
	}
	return vs
}

// watchCatchUp: the slow watcher must reach the last write once the
// consumer hurries, unless a node was stuck (then the cluster's
// violations say why; the client may be attached to that node).
func watchCatchUp(r *runConfig, end endOfRun) []check.Violation {
	if end.watchReached >= end.watchTarget || len(end.live.violations) > 0 || len(end.conv.violations) > 0 {
		return nil
	}
	return []check.Violation{{Checker: "watch", Detail: fmt.Sprintf("the Go client's Watch (subscriber %d) reached index %d, but every node had applied %d and the consumer was reading as fast as it could: %s",
		r.subscribers, end.watchReached, end.watchTarget, end.watchState)}}
}

func nonNil(items []check.Item) []check.Item {
	if items == nil {
		return []check.Item{}
	}
	return items
}

func summarize(r *runConfig, rec *recorder, faults []fault, res *result, truth *check.Truth, tput float64, end endOfRun, leases check.LeaseStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %v, nemesis %v, %d clients at %.0f ops/s, %d subscribers and a slow Go-client watcher (subscriber %d), %d client agents\n",
		r.seed, r.timeLimit, r.nemesis, r.concurrency, r.rate, r.subscribers, r.subscribers, r.clientAgents)
	bin := "built from ./cmd/plugreg"
	if r.plugregBin != "" {
		bin = r.plugregBin
	}
	fmt.Fprintf(&b, "agent: %s; %s, snapshot threshold %d, journal %d events; %s\n\n", bin, r.timeoutsText(), r.snapshotThreshold, r.journalSize, r.logStoreText())
	counts := map[string]map[string]int{}
	for _, op := range rec.ops {
		if counts[op.F] == nil {
			counts[op.F] = map[string]int{}
		}
		counts[op.F][op.Outcome]++
	}
	fmt.Fprintf(&b, "%-11s %7s %7s %7s\n", "operation", "ok", "fail", "unknown")
	for _, f := range []string{check.FRegister, check.FDeregister, check.FGet, check.FList} {
		fmt.Fprintf(&b, "%-11s %7d %7d %7d\n", f, counts[f][check.OK], counts[f][check.Fail], counts[f][check.Unknown])
	}
	if r.clientAgents > 0 {
		// The same through the client agents alone.
		via := map[string]bool{}
		for j := 0; j < r.clientAgents; j++ {
			via[fmt.Sprintf("c%d", j+1)] = true
		}
		var c [3]int
		for _, op := range rec.ops {
			if via[op.Node] {
				c[map[string]int{check.OK: 0, check.Fail: 1, check.Unknown: 2}[op.Outcome]]++
			}
		}
		cs := 0
		for _, s := range rec.sessions {
			if via[s.Node] {
				cs++
			}
		}
		fmt.Fprintf(&b, "%-11s %7d %7d %7d   (operations through client agents; %d event sessions on them)\n", "via client", c[0], c[1], c[2], cs)
	}
	events, resets := countEvents(rec.sessions)
	fmt.Fprintf(&b, "\nlog: %d entries to index %d; events received: %d in %d sessions, %d resets\n", len(truth.Entries), truth.LastIndex(), events, len(rec.sessions), resets)
	events, resets = countEvents(rec.stubSessions)
	fmt.Fprintf(&b, "stub plugins (type %s, on n1 and the client agents): %d events in %d sessions, %d resets\n", check.StubPluginType, events, len(rec.stubSessions), resets)
	if r.leaseHolders > 0 {
		fmt.Fprintf(&b, "leases (type %s, TTL %v, %d holders): %s\n", check.LeaseType, r.leaseTTL, r.leaseHolders, leaseText(leases))
	}
	fmt.Fprintf(&b, "throughput before the first fault: %.1f ok ops/s\n\nnemesis:\n", tput)
	byName := map[string][2]int{}
	for _, f := range faults {
		c := byName[f.Name]
		c[0]++
		if f.Effect {
			c[1]++
		}
		byName[f.Name] = c
		fmt.Fprintf(&b, "  %8.1fs-%6.1fs %-20s effect=%-5v %s\n", float64(f.Start)/1e9, float64(f.End)/1e9, f.Name, f.Effect, f.Detail)
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "\nfaults injected (took effect / total):")
	for _, n := range names {
		fmt.Fprintf(&b, " %s %d/%d;", n, byName[n][1], byName[n][0])
	}
	fmt.Fprintf(&b, "\n\n%s\n", end.logMarks)
	fmt.Fprintf(&b, "slow watcher: reached index %d of %d\n", end.watchReached, end.watchTarget)
	fmt.Fprintf(&b, "SIGTERM at the end:\n")
	for _, s := range end.stops {
		switch {
		case s.Hung:
			fmt.Fprintf(&b, "  %s: STILL RUNNING %v after SIGTERM; SIGQUIT, SIGKILL (%s); goroutines in %s\n", s.Node, termGrace, s.Status, s.Dump)
			for _, h := range s.Highlights {
				fmt.Fprintf(&b, "      %s\n", h)
			}
		case s.Status != "exit status 0":
			fmt.Fprintf(&b, "  %s: exited in %v, but with %s\n", s.Node, s.Took.Round(time.Millisecond), s.Status)
		default:
			fmt.Fprintf(&b, "  %s: exited in %v (%s)\n", s.Node, s.Took.Round(time.Millisecond), s.Status)
		}
	}
	fmt.Fprintf(&b, "\n")
	switch {
	case len(res.violations) > 0:
		fmt.Fprintf(&b, "VIOLATIONS (%d):\n", len(res.violations))
		for i, v := range res.violations {
			if i == 50 {
				fmt.Fprintf(&b, "  ... %d more in violations.txt\n", len(res.violations)-50)
				break
			}
			fmt.Fprintf(&b, "  %s\n", v)
		}
	case res.invalid != "":
		fmt.Fprintf(&b, "INVALID RUN: %s\n", res.invalid)
	default:
		fmt.Fprintf(&b, "VALID: no violation found by any checker\n")
	}
	return b.String()
}

// leaseText says what the lease holders did and how late expiries came.
func leaseText(st check.LeaseStats) string {
	lag := "no timed expiry"
	if n := len(st.Lag); n > 0 {
		lag = fmt.Sprintf("seen after the earliest deadline by min %v, median %v, max %v", st.Lag[0].Round(time.Millisecond), st.Lag[n/2].Round(time.Millisecond), st.Lag[n-1].Round(time.Millisecond))
	}
	return fmt.Sprintf("%d leases (%d applied), renewals %d ok / %d not; %d expired (%d while still renewed: their renewals failed for a TTL; %d unseen by subscribers), %d lost to a 404, %d deregistered; %s",
		st.Leases, st.Applied, st.RenewOK, st.RenewFail, st.Expired, st.ExpiredWhileHeld, st.Untimed, st.Lost, st.Deregistered, lag)
}

// countEvents counts the events (heartbeats aside) and resets received.
func countEvents(sessions []check.Session) (events, resets int) {
	for _, s := range sessions {
		for _, e := range s.Events {
			switch e.EventType {
			case "reset":
				resets++
			case "heartbeat":
			default:
				events++
			}
		}
	}
	return events, resets
}

func writeJSONL[T any](path string, xs []T) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for i := range xs {
		if err := enc.Encode(&xs[i]); err != nil {
			return err
		}
	}
	return nil
}

func writeResults(dir string, r *runConfig, rec *recorder, faults []fault, res *result) error {
	os.Remove(filepath.Join(dir, "plugreg")) // the binary is not a result
	os.RemoveAll(filepath.Join(dir, "data"))
	var errs []error
	errs = append(errs, writeJSONL(filepath.Join(dir, "history.jsonl"), rec.ops))
	errs = append(errs, writeJSONL(filepath.Join(dir, "events.jsonl"), rec.sessions))
	errs = append(errs, writeJSONL(filepath.Join(dir, "plugin-events.jsonl"), rec.stubSessions))
	errs = append(errs, writeJSONL(filepath.Join(dir, "nemesis.jsonl"), faults))
	errs = append(errs, writeJSONL(filepath.Join(dir, "leaders.jsonl"), rec.leaders))
	errs = append(errs, writeJSONL(filepath.Join(dir, "leases.jsonl"), rec.leases))
	errs = append(errs, os.WriteFile(filepath.Join(dir, "linearizability.html"), res.vis, 0o644))
	errs = append(errs, os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(res.summary), 0o644))
	var vs strings.Builder
	for _, v := range res.violations {
		vs.WriteString(v.String() + "\n")
	}
	errs = append(errs, os.WriteFile(filepath.Join(dir, "violations.txt"), []byte(vs.String()), 0o644))
	errs = append(errs, os.WriteFile(filepath.Join(dir, "timeline.svg"), timeline(r, rec.ops, faults), 0o644))
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
