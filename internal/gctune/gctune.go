// Package gctune bounds the headroom Go's garbage collector leaves above
// a server's live heap.
//
// With the default GOGC=100 the heap may grow to twice the live data
// before a collection, so a server holding a million instances (about 400
// MB live) ran at about 1 GB of RSS. Lowering GOGC for good would halve
// that headroom at every size, but costs CPU on every write at every size:
// 3-9% of write throughput with GOGC=50 on a small registry in the bench.
// A soft memory limit costs nothing while the heap is small and caps the
// headroom when it is large: Tuner sets the runtime's memory limit to the
// memory outside the heap, plus the live heap, plus max(Floor, live x
// Fraction), again every Interval as the registry grows or shrinks. The
// limit is soft (the runtime spends at most half its CPU on collection to
// keep it), so a sudden growth between two updates slows the process for a
// moment, never stops it.
//
// An operator's GOMEMLIMIT or GOGC wins: with either set in the
// environment, Start does nothing.
package gctune

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// Config tunes the headroom; zero fields take the defaults.
type Config struct {
	// Floor is the least headroom above the live heap (default 256 MiB):
	// below about that, GOGC=100 alone decides, as in any Go program.
	Floor uint64
	// Fraction of the live heap allowed as headroom above Floor's reach
	// (default 0.5: the heap of a large registry grows to 1.5x its live
	// data, not 2x).
	Fraction float64
	// Interval between updates (default 5s).
	Interval time.Duration
}

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

// Limit is the memory limit for a process whose live heap is live bytes and
// whose memory outside the heap (stacks, runtime structures) is other.
func (c Config) Limit(live, other uint64) uint64 {
	c = c.withDefaults()
	head := max(c.Floor, uint64(float64(live)*c.Fraction))
	return other + live + head
}

// Tuner updates the memory limit until Stop.
type Tuner struct {
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	previous int64
}

// Start begins tuning, or returns nil when the environment sets GOGC or
// GOMEMLIMIT (the operator's choice stands). Stop a non-nil Tuner.
func Start(cfg Config) *Tuner {
	if os.Getenv("GOMEMLIMIT") != "" || os.Getenv("GOGC") != "" {
		return nil
	}
	cfg = cfg.withDefaults()
	t := &Tuner{stop: make(chan struct{}), done: make(chan struct{}), previous: debug.SetMemoryLimit(-1)}
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	update := func() {
		metrics.Read(samples)
		for _, s := range samples {
			if s.Value.Kind() != metrics.KindUint64 {
				return // a runtime without these metrics: leave the limit alone
			}
		}
		live := samples[0].Value.Uint64()
		var heap uint64
		for _, s := range samples[2:] {
			heap += s.Value.Uint64()
		}
		total := samples[1].Value.Uint64()
		other := uint64(0)
		if total > heap {
			other = total - heap
		}
		limit := cfg.Limit(live, other)
		if limit > math.MaxInt64 {
			limit = math.MaxInt64
		}
		debug.SetMemoryLimit(int64(limit))
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

// Stop ends tuning and restores the limit found at Start. Idempotent; a nil
// Tuner is a no-op.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		close(t.stop)
		<-t.done
		debug.SetMemoryLimit(t.previous)
	})
}
