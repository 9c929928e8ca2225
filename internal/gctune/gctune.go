// Package gctune bounds the headroom Go's garbage collector leaves above
// a server's live heap.
//
// With the default GOGC=100 the heap may grow to twice the live data
// before a collection, so a server holding a million instances (about 400
// MB live) ran at about 1 GB of RSS. Lowering GOGC for good would halve
// that headroom at every size, but costs CPU on every write at every size:
// 3-9% of write throughput with GOGC=50 on a small registry in the bench.
// Tuner instead sets GOGC from the live heap, every Interval: headroom is
// max(Floor, live x Fraction), never more than GOGC=100 would give. A
// small registry runs as any Go program; a large one grows its heap to
// 1.5x its live data.
//
// Why GOGC and not a soft memory limit: a limit fixed between two updates
// is a wall. A server restoring a large snapshot grows its live heap by
// hundreds of MB in seconds, against a limit set for the small heap it had
// at start; fsm's BenchmarkRestore1M under a limit below the heap it
// builds took 10.5 s instead of 2-2.5 s. A GOGC only scales the heap goal
// with the live heap, so growth between updates costs what growth always
// costs.
//
// The price is collector CPU while a large heap takes writes fast: a 1M
// instance load ran at 1,915 writes/s against 2,445/s with GOGC=100
// (docs/benchmarks.md).
//
// An operator's GOMEMLIMIT or GOGC wins: with either set in the
// environment, Start does nothing.
package gctune

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// Config tunes the headroom; zero fields take the defaults.
type Config struct {
	// Floor is the least headroom above the live heap (default 256 MiB):
	// up to a live heap of Floor, GOGC=100 decides, as in any Go program;
	// between Floor and twice it, the headroom stays Floor.
	Floor uint64
	// Fraction of the live heap allowed as headroom above Floor's reach
	// (default 0.5: the heap of a large registry grows to 1.5x its live
	// data, not 2x).
	Fraction float64
	// Interval between updates (default 5s).
	Interval time.Duration
	// SmallHeaps gives a heap smaller than Floor the Floor as headroom
	// too (GOGC above 100): a server with a small registry then collects
	// once per Floor of allocation instead of once per live heap, which
	// at a few MiB live was a collection every few hundred writes and
	// 17 % of a server's CPU in the write bench. The price is RSS: up to
	// live + Floor. Servers set it; client agents, one per host, do not.
	SmallHeaps bool
}

// smallHeapMin is the least live heap SmallHeaps divides the Floor by: a
// nearly empty heap would otherwise ask for a GOGC in the tens of
// thousands (legal, but a number nobody can read in a profile).
const smallHeapMin = 16 << 20

func (c Config) withDefaults() Config {
	if c.Floor == 0 {
		c.Floor = 256 << 20
	}
	if c.Fraction <= 0 {
		c.Fraction = 0.5
	}
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	return c
}

// Percent is the GOGC for a live heap of live bytes: the headroom
// max(Floor, live x Fraction) as a percentage of live, at most 100.
func (c Config) Percent(live uint64) int {
	c = c.withDefaults()
	if live == 0 {
		return 100
	}
	head := max(c.Floor, uint64(float64(live)*c.Fraction))
	if head >= live {
		if c.SmallHeaps {
			return int(head * 100 / max(live, smallHeapMin))
		}
		return 100
	}
	return max(1, int(head*100/live))
}

// Tuner updates GOGC until Stop.
type Tuner struct {
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	previous int
}

// Start begins tuning, or returns nil when the environment sets GOGC or
// GOMEMLIMIT (the operator's choice stands). Stop a non-nil Tuner.
func Start(cfg Config) *Tuner {
	if os.Getenv("GOMEMLIMIT") != "" || os.Getenv("GOGC") != "" {
		return nil
	}
	cfg = cfg.withDefaults()
	t := &Tuner{stop: make(chan struct{}), done: make(chan struct{})}
	t.previous = debug.SetGCPercent(100)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	update := func() {
		metrics.Read(live)
		if live[0].Value.Kind() != metrics.KindUint64 {
			return // a runtime without the metric: leave GOGC alone
		}
		debug.SetGCPercent(cfg.Percent(live[0].Value.Uint64()))
	}
	update()
	go func() {
		defer close(t.done)
		tick := time.NewTicker(cfg.Interval)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				return
			case <-tick.C:
				update()
			}
		}
	}()
	return t
}

// Stop ends tuning and restores the GOGC found at Start. Idempotent; a nil
// Tuner is a no-op.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		close(t.stop)
		<-t.done
		debug.SetGCPercent(t.previous)
	})
}
