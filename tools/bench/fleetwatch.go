package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
)

// ---- what each server lists ----

// fleetTracker follows one server's event stream from index 0 over the
// fleet's types and counts the fleet's instances in it.
type fleetTracker struct {
	server string
	mu     sync.Mutex
	allocs map[string]bool
	resets int
	count  atomic.Int64
	lw     lowWater
}

func (b *fleetBench) startTracker(ctx context.Context, nd *plugregNode, wg *sync.WaitGroup) (*fleetTracker, error) {
	cli, tr, err := b.sys.newClient([]string{b.pc.url(nd)})
	if err != nil {
		return nil, err
	}
	t := &fleetTracker{server: nd.id, allocs: map[string]bool{}}
	ch := cli.Stream(ctx, 0, client.WatchOptions{Types: fleetTypes}).Events()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer tr.CloseIdleConnections()
		for ev := range ch {
			t.apply(ev)
		}
	}()
	return t, nil
}

func (t *fleetTracker) apply(ev *api.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	add := func(p *api.PluginInfo) {
		if p != nil && strings.HasPrefix(p.NodeID, fleetHostPrefix) {
			t.allocs[p.AllocID] = true
		}
	}
	switch ev.EventType {
	case "registered", "updated":
		add(ev.Info)
	case "deregistered", "expired":
		if ev.Info != nil {
			delete(t.allocs, ev.Info.AllocID)
		}
	case "reset":
		t.resets++
		clear(t.allocs)
		for _, p := range ev.Plugins {
			add(p)
		}
	}
	t.count.Store(int64(len(t.allocs)))
	t.noteCount(int64(len(t.allocs)))
}

// waitCount waits until the server lists want instances of the fleet and
// returns when the bench saw it (polled every 10 ms).
func (t *fleetTracker) waitCount(ctx context.Context, want int, deadline time.Time) (time.Time, error) {
	for {
		if int(t.count.Load()) >= want {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("fleet: %s lists %d of %d instances at the deadline", t.server, t.count.Load(), want)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ---- the watchers ----

// fleetWatchers are W event streams on the servers, round robin, each
// over the fleet's types from the index of its start; for every index,
// how many received it and when the last one did.
type fleetWatchers struct {
	mu     sync.Mutex
	recv   map[uint64]*fleetRecv
	resets int
	n      int

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type fleetRecv struct {
	n           int
	first, last int64
}

func (w *fleetWatchers) note(idx uint64, at int64) {
	w.mu.Lock()
	r := w.recv[idx]
	if r == nil {
		r = &fleetRecv{}
		w.recv[idx] = r
	}
	r.n++
	r.last = max(r.last, at)
	if r.first == 0 || at < r.first {
		r.first = at
	}
	w.mu.Unlock()
}

func (w *fleetWatchers) get(idx uint64) fleetRecv {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.recv[idx]; r != nil {
		return *r
	}
	return fleetRecv{}
}

func (w *fleetWatchers) resetCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resets
}

// startWatchers starts the watchers and returns the servers' live heap
// per watcher (all three; RSS moves with the GC more than with them). They run until stopWatchers: a start storm
// without them, since 1,000 watchers of 200,000 registrations are 200
// million deliveries that this machine would spend the storm on.
func (b *fleetBench) startWatchers(ctx context.Context) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &fleetWatchers{recv: map[uint64]*fleetRecv{}, n: b.f.watchers, cancel: cancel}
	b.watch = w
	wg := &w.wg
	heapBefore, err := b.liveHeapAll(ctx)
	if err != nil {
		return 0, err
	}
	logf("fleet: starting %d watchers over the 3 servers", w.n)
	// Each from its server's applied index: only new events.
	var from []uint64
	for _, nd := range b.pc.nodes {
		var h plugregHealth
		var err error
		if !waitFor(ctx, 30*time.Second, func() bool { h, err = b.pc.health(ctx, nd); return err == nil }) {
			return 0, fmt.Errorf("fleet watchers: health of %s: %w", nd.id, err)
		}
		from = append(from, h.AppliedIndex)
	}
	for k := 0; k < w.n; k++ {
		nd := b.pc.nodes[k%members]
		cli, tr, err := b.sys.newClient([]string{b.pc.url(nd)})
		if err != nil {
			return 0, err
		}
		ch := cli.Stream(ctx, from[k%members], client.WatchOptions{Types: fleetTypes}).Events()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.CloseIdleConnections()
			for ev := range ch {
				switch ev.EventType {
				case "registered", "updated":
					w.note(ev.Index, time.Now().UnixNano())
				case "reset":
					w.mu.Lock()
					w.resets++
					w.mu.Unlock()
				}
			}
		}()
	}
	// Let every stream connect and the servers' memory settle.
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return 0, err
	}
	heapAfter, err := b.liveHeapAll(ctx)
	if err != nil {
		return 0, err
	}
	per := float64(heapAfter-heapBefore) / float64(max(1, w.n))
	logf("fleet: watchers up; servers' live heap %+.0f B per watcher (all three)", per)
	return per, nil
}

// liveHeapAll sums the servers' live heaps.
func (b *fleetBench) liveHeapAll(ctx context.Context) (int64, error) {
	var sum int64
	for i := 0; i < members; i++ {
		h, err := b.liveHeap(ctx, i)
		if err != nil {
			return 0, err
		}
		sum += h
	}
	return sum, nil
}

// stopWatchers ends the watchers' streams and waits for them.
func (b *fleetBench) stopWatchers() {
	if b.watch == nil {
		return
	}
	b.watch.cancel()
	b.watch.wg.Wait()
	b.watch = nil
}

// ---- churn ----

// churn has the host processes make -fleet-churn-rate writes a second
// for d, spread over them and their hosts, and measures the writes, the
// delivery to every watcher and the leader's CPU.
func (b *fleetBench) churn(ctx context.Context, d time.Duration) (*fleetChurn, error) {
	f := b.f
	live := b.liveProcs()
	k := len(live)
	total := int(f.churnRate * d.Seconds())
	c := &fleetChurn{Rate: f.churnRate, Seconds: d.Seconds()}
	if b.watch != nil {
		c.Watchers = b.watch.n
	}
	every := time.Duration(float64(k) / f.churnRate * float64(time.Second))
	l, err := b.leader(ctx)
	if err != nil {
		return nil, err
	}
	b.seq++
	version := fmt.Sprintf("2.%d", b.seq)
	logf("fleet: churn %.0f writes/s for %v through %d host processes, %d watchers", f.churnRate, d, k, f.watchers)
	l0 := mustCPU(b.sys.pid(l))
	prof := b.profileLeader(ctx, l, d, fmt.Sprintf("leader-churn-%d-hosts-%d.pprof", b.hosts(), b.seq))
	results := make([][]fleetChurnWrite, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for j, p := range live {
		n := total / k
		if j < total%k {
			n++
		}
		offset := time.Duration(j) * time.Duration(float64(time.Second)/f.churnRate)
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := fmt.Sprintf("%s/churn?every=%s&n=%d&offset=%s&version=%s", p.url, every, n, offset, url.QueryEscape(version))
			errs[j] = b.doJSON(ctx, "POST", u, &results[j])
		}()
	}
	wg.Wait()
	c.LeaderCPUPerWrite = ms(mustCPU(b.sys.pid(l))-l0) / float64(max(1, total))
	if err := prof(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("fleet churn: %w", err)
		}
	}
	var writes []fleetChurnWrite
	for _, r := range results {
		writes = append(writes, r...)
	}
	// Let the last deliveries arrive.
	if b.watch != nil {
		waitFor(ctx, 10*time.Second, func() bool {
			for _, w := range writes {
				if w.Err == "" && b.watch.get(w.Index).n < b.watch.n {
					return false
				}
			}
			return true
		})
	}
	var lat, ackToLast, startToLast []float64
	for _, w := range writes {
		if w.Err != "" {
			c.Errors++
			continue
		}
		c.Writes++
		lat = append(lat, float64(w.AckNs-w.StartNs)/1e6)
		if b.watch == nil {
			continue
		}
		r := b.watch.get(w.Index)
		if r.n < b.watch.n {
			c.Undelivered++
			continue
		}
		// The commit came before the writer's ack and before any
		// watcher's receipt: from the earlier of the two is a lower
		// bound of commit -> last (a starved writer reads its ack late).
		ackToLast = append(ackToLast, float64(r.last-min(w.AckNs, r.first))/1e6)
		startToLast = append(startToLast, float64(r.last-w.StartNs)/1e6)
	}
	c.WriteP50, c.WriteP99 = quantile(lat, 0.5), quantile(lat, 0.99)
	c.AckToLastP50, c.AckToLastP99, c.AckToLastMax = quantile(ackToLast, 0.5), quantile(ackToLast, 0.99), quantile(ackToLast, 1)
	c.StartToLastP99 = quantile(startToLast, 0.99)
	logf("fleet: churn: %d writes (%d errors) p50 %.1fms p99 %.1fms; commit (ack or first receipt) -> last of %d watchers p50 %.1fms p99 %.1fms max %.1fms (start -> last p99 %.1fms), %d not at every watcher; leader %.2f ms CPU per write",
		c.Writes, c.Errors, c.WriteP50, c.WriteP99, c.Watchers, c.AckToLastP50, c.AckToLastP99, c.AckToLastMax, c.StartToLastP99, c.Undelivered, c.LeaderCPUPerWrite)
	return c, nil
}

// hosts is how many hosts the fleet has.
func (b *fleetBench) hosts() int {
	n := 0
	for _, p := range b.procs {
		n += p.spec.Count
	}
	return n
}

// liveProcs are the host processes the bench has not stopped.
func (b *fleetBench) liveProcs() []*fleetProc {
	var out []*fleetProc
	for _, p := range b.procs {
		p.proc.mu.Lock()
		paused := p.proc.paused
		p.proc.mu.Unlock()
		if !paused {
			out = append(out, p)
		}
	}
	return out
}

// ---- markers: has every host's upstream delivered? ----

// writeMarker writes one marker (the signal type) through any server,
// retrying until one is acknowledged, and returns its index.
func (b *fleetBench) writeMarker(ctx context.Context, deadline time.Time) (uint64, time.Time, error) {
	for {
		b.seq++
		p := &api.PluginInfo{Type: b.f.signalType, Name: fleetSignalName, AllocID: "bench", NodeID: "fleet-bench", Version: fmt.Sprintf("%d", b.seq),
			ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/marker.sock"}}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := b.marker.Register(wctx, p)
		cancel()
		if err == nil {
			return res.Index, time.Now(), nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return 0, time.Time{}, fmt.Errorf("fleet: no marker write acknowledged: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMarker waits until every host of procs received the marker at idx
// and returns the last receipt.
func (b *fleetBench) waitMarker(ctx context.Context, procs []*fleetProc, idx uint64, deadline time.Time) (time.Time, error) {
	t0, said := time.Now(), time.Now()
	for {
		var last int64
		var missing []string
		for _, p := range procs {
			var ts []int64
			if err := b.getJSON(ctx, fmt.Sprintf("%s/signals?index=%d", p.url, idx), &ts); err != nil {
				return time.Time{}, err
			}
			for j, t := range ts {
				if t == 0 {
					missing = append(missing, fleetHostName(p.spec.From+j))
				}
				last = max(last, t)
			}
		}
		if len(missing) == 0 {
			return time.Unix(0, last), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("fleet: %d hosts never received the marker at %d (%s)", len(missing), idx, firstFew(missing))
		}
		// A host that lags far behind the others is worth a look while
		// it still runs (its process's log, the servers' streams).
		if time.Since(said) >= 30*time.Second {
			said = time.Now()
			logf("fleet: %d hosts still without the marker at %d after %v: %s", len(missing), idx, time.Since(t0).Round(time.Second), firstFew(missing))
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// hostResets sums the resets the hosts' subscribers received.
func (b *fleetBench) hostResets(ctx context.Context) (int, error) {
	n := 0
	for _, p := range b.procs {
		s, err := b.childState(ctx, p, false)
		if err != nil {
			return 0, err
		}
		n += s.Resets
	}
	return n, nil
}

func (b *fleetBench) watcherResets() int {
	if b.watch == nil {
		return 0
	}
	return b.watch.resetCount()
}

// listedPerServer counts the fleet's instances each server lists (a stale
// read of every name's instances).
func (b *fleetBench) listedPerServer(ctx context.Context) ([]int, error) {
	var out []int
	for _, nd := range b.pc.nodes {
		cli, tr, err := b.sys.newClient([]string{b.pc.url(nd)})
		if err != nil {
			return nil, err
		}
		n := 0
		for k := 0; k < b.f.plugins; k++ {
			p := fleetPlugin(0, k, "")
			insts, _, err := cli.Instances(ctx, p.Type, p.Name, &client.QueryOptions{Stale: true})
			if err != nil {
				tr.CloseIdleConnections()
				return nil, fmt.Errorf("instances of %s on %s: %w", p.Name, nd.id, err)
			}
			for _, in := range insts {
				if strings.HasPrefix(in.NodeID, fleetHostPrefix) {
					n++
				}
			}
		}
		tr.CloseIdleConnections()
		out = append(out, n)
	}
	return out, nil
}

// ---- scenarios ----

// snapshot times a snapshot save (GET /v1/snapshot) from the leader.
func (b *fleetBench) snapshot(ctx context.Context) error {
	l, err := b.leader(ctx)
	if err != nil {
		return err
	}
	cli, tr, err := b.sys.newClient([]string{b.pc.url(b.pc.nodes[l])})
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	var cw countingWriter
	t0 := time.Now()
	if err := cli.SnapshotSave(ctx, &cw, nil); err != nil {
		return fmt.Errorf("fleet snapshot: %w", err)
	}
	b.rep.SnapshotSeconds, b.rep.SnapshotBytes = time.Since(t0).Seconds(), cw.n
	logf("fleet: snapshot save from the leader: %.1f MiB in %.2fs", float64(cw.n)/(1<<20), b.rep.SnapshotSeconds)
	return nil
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

var _ io.Writer = (*countingWriter)(nil)

// restartServers stops all three servers (SIGTERM) and starts them again,
// and times until they serve what they had and every host's upstream
// delivers again.
func (b *fleetBench) restartServers(ctx context.Context) (*fleetRecovery, error) {
	r := &fleetRecovery{What: "all three servers SIGTERM'd and restarted"}
	l, err := b.leader(ctx)
	if err != nil {
		return nil, err
	}
	var want uint64
	if !waitFor(ctx, 30*time.Second, func() bool { want, err = appliedIndex(ctx, b.sys, l); return err == nil }) {
		return nil, fmt.Errorf("fleet: the leader's applied index: %w", err)
	}
	hr0, wr0 := 0, b.watcherResets()
	if hr0, err = b.hostResets(ctx); err != nil {
		return nil, err
	}
	logf("fleet: restarting the three servers")
	t0 := time.Now()
	b.pc.stop()
	for _, nd := range b.pc.nodes {
		if err := nd.proc.start(); err != nil {
			return nil, err
		}
	}
	deadline := t0.Add(b.f.timeout)
	if err := b.waitApplied(ctx, want); err != nil {
		return nil, err
	}
	r.ReadySeconds = time.Since(t0).Seconds()
	if err := b.resumed(ctx, r, t0, deadline, hr0, wr0); err != nil {
		return nil, err
	}
	return r, nil
}

// waitApplied waits until every server has applied index want.
func (b *fleetBench) waitApplied(ctx context.Context, want uint64) error {
	ok := waitFor(ctx, b.f.timeout, func() bool {
		for i := range b.pc.nodes {
			if got, err := appliedIndex(ctx, b.sys, i); err != nil || got < want {
				return false
			}
		}
		return true
	})
	if !ok {
		return fmt.Errorf("fleet: the servers did not serve index %d within %v", want, b.f.timeout)
	}
	return nil
}

// resumed fills r's resumption figures: a marker written now reaches
// every host, then the resets and what every server lists.
func (b *fleetBench) resumed(ctx context.Context, r *fleetRecovery, t0, deadline time.Time, hr0, wr0 int) error {
	idx, _, err := b.writeMarker(ctx, deadline)
	if err != nil {
		return err
	}
	last, err := b.waitMarker(ctx, b.procs, idx, deadline)
	if err != nil {
		return err
	}
	r.ResumedSeconds = last.Sub(t0).Seconds()
	hr, err := b.hostResets(ctx)
	if err != nil {
		return err
	}
	r.HostResets, r.WatcherResets = hr-hr0, b.watcherResets()-wr0
	if r.Listed, err = b.listedPerServer(ctx); err != nil {
		return err
	}
	logf("fleet: %s: ready %.2fs, first write %.2fs, every upstream resumed %.2fs; resets: hosts %d, watchers %d; listed %v",
		r.What, r.ReadySeconds, r.FirstWriteSeconds, r.ResumedSeconds, r.HostResets, r.WatcherResets, r.Listed)
	return nil
}

// failover kills the leader (SIGKILL) and times the first acknowledged
// write (through either survivor), every host's upstream delivering
// again, and counts resets; then restarts the killed server.
func (b *fleetBench) failover(ctx context.Context) (*fleetRecovery, error) {
	r := &fleetRecovery{What: "kill -9 of the leader"}
	l, err := b.leader(ctx)
	if err != nil {
		return nil, err
	}
	hr0, err := b.hostResets(ctx)
	if err != nil {
		return nil, err
	}
	wr0 := b.watcherResets()
	var clis []*client.Client
	for i, nd := range b.pc.nodes {
		if i == l {
			continue
		}
		cli, tr, err := b.sys.newClient([]string{b.pc.url(nd)})
		if err != nil {
			return nil, err
		}
		defer tr.CloseIdleConnections()
		clis = append(clis, cli)
	}
	logf("fleet: kill -9 of the leader (%s)", b.pc.nodes[l].id)
	t0 := time.Now()
	b.pc.nodes[l].proc.kill()
	deadline := t0.Add(b.f.timeout)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	type ack struct {
		idx uint64
		at  time.Time
	}
	got := make(chan ack, len(clis))
	var wg sync.WaitGroup
	for k, cli := range clis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; rctx.Err() == nil; attempt++ {
				p := &api.PluginInfo{Type: b.f.signalType, Name: fleetSignalName, AllocID: fmt.Sprintf("failover-%d", k), NodeID: "fleet-bench",
					Version: fmt.Sprintf("%d", attempt), ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/marker.sock"}}
				actx, acancel := context.WithTimeout(rctx, 2*time.Second)
				res, err := cli.Register(actx, p)
				acancel()
				if err == nil {
					got <- ack{res.Index, time.Now()}
					return
				}
				sleepCtx(rctx, 10*time.Millisecond)
			}
		}()
	}
	var first ack
	select {
	case first = <-got:
	case <-rctx.Done():
	}
	cancel()
	wg.Wait()
	if first.idx == 0 {
		return nil, fmt.Errorf("fleet: no write acknowledged within %v of killing the leader", b.f.timeout)
	}
	r.FirstWriteSeconds = first.at.Sub(t0).Seconds()
	// Every upstream resumed: every host received the first write.
	last, err := b.waitMarker(ctx, b.procs, first.idx, deadline)
	if err != nil {
		return nil, err
	}
	r.ResumedSeconds = last.Sub(t0).Seconds()
	hr, err := b.hostResets(ctx)
	if err != nil {
		return nil, err
	}
	r.HostResets, r.WatcherResets = hr-hr0, b.watcherResets()-wr0
	if err := b.pc.nodes[l].proc.start(); err != nil {
		return nil, err
	}
	if err := b.pc.waitReady(ctx, 120*time.Second); err != nil {
		return nil, err
	}
	// A restarted server serves its last snapshot until the leader tells
	// it what is committed since: list once it has caught up.
	if err := b.waitApplied(ctx, first.idx); err != nil {
		return nil, err
	}
	if r.Listed, err = b.listedPerServer(ctx); err != nil {
		return nil, err
	}
	logf("fleet: %s: first write %.2fs, every upstream resumed %.2fs; resets: hosts %d, watchers %d; listed after the restart of the killed one %v",
		r.What, r.FirstWriteSeconds, r.ResumedSeconds, r.HostResets, r.WatcherResets, r.Listed)
	return r, nil
}

// darkHosts stops (SIGSTOP) -fleet-dark-share of the host processes, runs
// the churn meanwhile, continues them and times until their upstreams
// deliver again and their gossiping hosts are alive on the leader.
func (b *fleetBench) darkHosts(ctx context.Context) (*fleetDark, error) {
	n := max(1, int(math.Round(b.f.darkShare*float64(len(b.procs)))))
	var dark []*fleetProc
	for j := 0; j < n; j++ {
		dark = append(dark, b.procs[j*len(b.procs)/n])
	}
	d := &fleetDark{Seconds: b.f.darkFor.Seconds()}
	names := map[string]bool{}
	for _, p := range dark {
		d.Hosts += p.spec.Count
		d.GossipHosts += p.spec.Gossip
		for j := 0; j < p.spec.Gossip; j++ {
			names[fleetHostName(p.spec.From+j)] = true
		}
	}
	logf("fleet: %d hosts dark (SIGSTOP of %d host processes) for %v", d.Hosts, len(dark), b.f.darkFor)
	t0 := time.Now()
	for _, p := range dark {
		if err := p.proc.pause(); err != nil {
			return nil, err
		}
	}
	churnFor := b.f.darkFor
	var err error
	if d.Churn, err = b.churn(ctx, churnFor); err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, time.Until(t0.Add(b.f.darkFor))); err != nil {
		return nil, err
	}
	t1 := time.Now()
	for _, p := range dark {
		p.proc.resume()
	}
	deadline := t1.Add(b.f.timeout)
	idx, _, err := b.writeMarker(ctx, deadline)
	if err != nil {
		return nil, err
	}
	last, err := b.waitMarker(ctx, dark, idx, deadline)
	if err != nil {
		return nil, err
	}
	d.ResumedSeconds = last.Sub(t1).Seconds()
	for nm := range names {
		if b.memb.wentNotAlive(nm, t0) {
			d.MarkedNotAlive++
		}
	}
	// Those the leader marked: when it saw each alive again.
	for nm := range names {
		if !b.memb.wentNotAlive(nm, t0) {
			continue
		}
		if !waitFor(ctx, b.f.timeout, func() bool { return b.memb.status(nm) == "alive" }) {
			return nil, fmt.Errorf("fleet: dark host %s not alive on the leader %v after it was continued", nm, b.f.timeout)
		}
		if at, ok := b.memb.firstAfter(nm, "alive", t1); ok {
			d.AliveSeconds = max(d.AliveSeconds, at.Sub(t1).Seconds())
		}
	}
	if d.InstancesListed, err = b.listedPerServer(ctx); err != nil {
		return nil, err
	}
	for _, t := range b.track {
		at, err := t.waitCount(ctx, b.hosts()*b.f.plugins, deadline)
		if err != nil {
			return nil, err
		}
		d.RelistedSeconds = max(d.RelistedSeconds, at.Sub(t1).Seconds())
	}
	logf("fleet: dark: %d gossip hosts of %d marked not alive; upstreams resumed %.2fs after continue, gossip hosts alive after %.2fs; listed %v then all again after %.2fs",
		d.MarkedNotAlive, d.GossipHosts, d.ResumedSeconds, d.AliveSeconds, d.InstancesListed, d.RelistedSeconds)
	return d, nil
}

// falseSuspicions counts the gossiping hosts a server's view showed other
// than alive after they were first alive; the bench calls it before it
// stops any host or server.
func (b *fleetBench) falseSuspicions() int {
	b.memb.mu.Lock()
	defer b.memb.mu.Unlock()
	n := 0
	for name, trs := range b.memb.trans {
		if !strings.HasPrefix(name, fleetHostPrefix) {
			continue
		}
		seenAlive := false
		for _, tr := range trs {
			if tr.status == "alive" {
				seenAlive = true
			} else if seenAlive {
				n++
				break
			}
		}
	}
	return n
}

func (m *memberLog) wentNotAlive(name string, since time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, tr := range m.trans[name] {
		if tr.status != "alive" && !tr.at.Before(since) {
			return true
		}
	}
	return false
}

func (m *memberLog) status(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[name]
}

// firstFew is up to five of names, and how many more.
func firstFew(names []string) string {
	if len(names) <= 5 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
}
