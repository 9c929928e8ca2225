package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// ---- rolling restart of the hosts' agents ----

// fleetRolling is a rolling restart of the client agents, one host
// process (many hosts) at a time, as an upgrade of the agents goes.
type fleetRolling struct {
	Procs int `json:"host_processes"`
	Hosts int `json:"hosts"`
	// Per process: from its SIGTERM until every one of its hosts
	// received, over its new upstream, a write made once it was back.
	PerProcP50Seconds float64 `json:"per_process_p50_s"`
	PerProcMaxSeconds float64 `json:"per_process_max_s"`
	TotalSeconds      float64 `json:"total_s"`
	// The fewest of the fleet's instances any server listed at any
	// moment of the roll: an agent's restart must not cost its plugins'
	// registrations.
	FewestListed    int     `json:"fewest_instances_listed"`
	StartWriteP50Ms float64 `json:"start_write_p50_ms"`
	StartWriteP99Ms float64 `json:"start_write_p99_ms"`
	StartWriteErrs  int     `json:"start_write_errors"`
	HostResets      int     `json:"host_resets"`
	Listed          []int   `json:"instances_listed_per_server"`
}

// rollingRestart restarts the host processes one after another: SIGTERM
// (each host's agent shuts down as it does on an upgrade), start again,
// wait until its hosts have started and their upstreams deliver.
func (b *fleetBench) rollingRestart(ctx context.Context) (*fleetRolling, error) {
	r := &fleetRolling{Procs: len(b.procs), Hosts: b.hosts()}
	hr0, err := b.hostResets(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range b.track {
		t.markLow()
	}
	logf("fleet: rolling restart of %d host processes (%d hosts), one at a time", len(b.procs), r.Hosts)
	t0 := time.Now()
	var per, lat []float64
	for _, p := range b.procs {
		t := time.Now()
		deadline := t.Add(b.f.timeout)
		p.proc.stop(20 * time.Second)
		if err := p.proc.start(); err != nil {
			return nil, err
		}
		if err := b.waitChild(ctx, p, deadline, func(s fleetChildState) bool {
			return s.Started+s.Failed == p.spec.Count && s.Announced+s.Failed == p.spec.Count
		}); err != nil {
			return nil, err
		}
		s, err := b.childState(ctx, p, true)
		if err != nil {
			return nil, err
		}
		if s.Failed > 0 {
			return nil, fmt.Errorf("fleet: %d hosts of %s did not start again (its log: %s)", s.Failed, p.proc.name, p.proc.logPath)
		}
		lat = append(lat, s.PutMs...)
		r.StartWriteErrs += s.PutErrors
		idx, _, err := b.writeMarker(ctx, deadline)
		if err != nil {
			return nil, err
		}
		last, err := b.waitMarker(ctx, []*fleetProc{p}, idx, deadline)
		if err != nil {
			return nil, err
		}
		per = append(per, last.Sub(t).Seconds())
	}
	r.TotalSeconds = time.Since(t0).Seconds()
	r.PerProcP50Seconds, r.PerProcMaxSeconds = quantile(per, 0.5), slices.Max(per)
	r.StartWriteP50Ms, r.StartWriteP99Ms = quantile(lat, 0.5), quantile(lat, 0.99)
	r.FewestListed = -1
	for _, t := range b.track {
		if low := t.lowest(); r.FewestListed < 0 || low < r.FewestListed {
			r.FewestListed = low
		}
	}
	hr, err := b.hostResets(ctx)
	if err != nil {
		return nil, err
	}
	r.HostResets = hr - hr0
	if r.Listed, err = b.listedPerServer(ctx); err != nil {
		return nil, err
	}
	logf("fleet: rolling restart: %.1fs in all, per process p50 %.2fs max %.2fs; fewest instances listed %d of %d; start writes p50 %.1fms p99 %.1fms, %d errors; host resets %d; listed %v",
		r.TotalSeconds, r.PerProcP50Seconds, r.PerProcMaxSeconds, r.FewestListed, r.Hosts*b.f.plugins, r.StartWriteP50Ms, r.StartWriteP99Ms, r.StartWriteErrs, r.HostResets, r.Listed)
	return r, nil
}

// ---- a leader killed during the start storm ----

// stormKill is a kill -9 of the leader in the middle of a start storm:
// once a quarter of the new instances are listed on some server, the
// leader is killed; the killed server is started again after restartAfter
// (a supervisor's delay), so that every server can list the fleet.
type stormKill struct {
	KilledAtSeconds    float64 `json:"killed_at_s"`
	ListedAtKill       int     `json:"instances_listed_at_kill"`
	RestartedAtSeconds float64 `json:"restarted_at_s"`
	err                error
	done               chan struct{}
}

const stormRestartAfter = 5 * time.Second

// startStormKill runs the kill in the background of growTo's wait; its
// done channel is closed once the killed server runs again.
func (b *fleetBench) startStormKill(ctx context.Context, t0 time.Time, from, want int) *stormKill {
	k := &stormKill{done: make(chan struct{})}
	go func() {
		defer close(k.done)
		threshold := from + (want-from)/4
		for {
			n := 0
			for _, t := range b.track {
				n = max(n, int(t.count.Load()))
			}
			if n >= threshold {
				k.ListedAtKill = n
				break
			}
			if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
				k.err = err
				return
			}
		}
		l, err := b.leader(ctx)
		if err != nil {
			k.err = err
			return
		}
		logf("fleet: kill -9 of the leader (%s) with %d of %d instances listed", b.pc.nodes[l].id, k.ListedAtKill, want)
		b.pc.nodes[l].proc.kill()
		k.KilledAtSeconds = time.Since(t0).Seconds()
		if err := sleepCtx(ctx, stormRestartAfter); err != nil {
			k.err = err
			return
		}
		k.err = b.pc.nodes[l].proc.start()
		k.RestartedAtSeconds = time.Since(t0).Seconds()
	}()
	return k
}

// ---- the trackers' low-water mark ----

// lowWater is the fewest instances a tracker counted since markLow.
type lowWater struct{ low atomic.Int64 }

func (t *fleetTracker) markLow() { t.lw.low.Store(t.count.Load()) }

func (t *fleetTracker) lowest() int { return int(t.lw.low.Load()) }

// noteCount lowers the mark to n if n is lower (called with t.mu held).
func (t *fleetTracker) noteCount(n int64) {
	if n < t.lw.low.Load() {
		t.lw.low.Store(n)
	}
}
