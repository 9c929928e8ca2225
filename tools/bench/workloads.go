package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// opTimeout bounds one operation; a write that takes longer counts as an
// error.
const opTimeout = 15 * time.Second

// closedLoop runs conc workers, each issuing op back to back until dur has
// passed (or op reports errExhausted), and summarises their latencies.
func closedLoop(ctx context.Context, conc int, dur time.Duration, unit string, op func(ctx context.Context, w, i int) error) stats {
	var (
		mu       sync.Mutex
		all      []time.Duration
		errs     int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(dur)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			nerr := 0
			var ferr error
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				t0 := time.Now()
				err := op(octx, w, i)
				d := time.Since(t0)
				cancel()
				if errors.Is(err, errExhausted) {
					break
				}
				if err != nil {
					nerr++
					if ferr == nil {
						ferr = err
					}
					continue
				}
				lat = append(lat, d)
			}
			mu.Lock()
			all = append(all, lat...)
			errs += nerr
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	s := summarize(all, errs, time.Since(start), unit)
	if firstErr != nil {
		s.FirstErr = firstErr.Error()
	}
	return s
}

var errExhausted = errors.New("no more work")

// clientPool holds one client per worker, spread over the nodes.
type clientPool[T interface{ close() }] struct{ cs []T }

func (p *clientPool[T]) close() {
	for _, c := range p.cs {
		c.close()
	}
}

// newWriters makes conc writers, worker w talking to node (first+w) mod 3.
func newWriters(s system, conc, first int) (*clientPool[writer], error) {
	p := &clientPool[writer]{}
	for w := 0; w < conc; w++ {
		c, err := s.writer((first + w) % members)
		if err != nil {
			p.close()
			return nil, err
		}
		p.cs = append(p.cs, c)
	}
	return p, nil
}

func newReaders(s system, conc, node int) (*clientPool[reader], error) {
	p := &clientPool[reader]{}
	for w := 0; w < conc; w++ {
		c, err := s.reader(node)
		if err != nil {
			p.close()
			return nil, err
		}
		p.cs = append(p.cs, c)
	}
	return p, nil
}

// warmWriters makes one write through every writer, all at once, before
// a cell's clock starts: a plugreg client dials on its first request and
// an etcd client in the background once made, so either could otherwise
// connect inside the measured window; after a resume (-pause-idle) a kept
// connection may also need a new one. Worker w rewrites the same record
// (type "warmup") at every warm-up, so the registry does not grow.
func warmWriters(ctx context.Context, p *clientPool[writer]) error {
	return forEachClient(ctx, len(p.cs), func(ctx context.Context, w int) error {
		return p.cs[w].register(ctx, rec{Type: "warmup", Name: fmt.Sprintf("w%04d", w), Alloc: "warm"})
	})
}

// warmReaders makes one list of the cell's kind through every reader, all
// at once, for the same reason.
func warmReaders(ctx context.Context, p *clientPool[reader], stale bool) error {
	return forEachClient(ctx, len(p.cs), func(ctx context.Context, w int) error {
		_, err := p.cs[w].list(ctx, "list", stale)
		return err
	})
}

// forEachClient runs fn for workers 0 to n-1 at once, each within
// opTimeout, and returns the first error, with how many failed.
func forEachClient(ctx context.Context, n int, fn func(ctx context.Context, w int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			errs[w] = fn(octx, w)
		}()
	}
	wg.Wait()
	failed, first := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("warm-up: %d of %d clients failed, first: %w", failed, n, first)
	}
	return nil
}

// registerCell registers fresh instances (type "bench", 10,000 names) and
// returns what it registered, for deregisterCell to remove.
func registerCell(ctx context.Context, s system, ws *clientPool[writer], conc int, dur time.Duration, tag string) (stats, []rec) {
	var mu sync.Mutex
	var done []rec
	var seq atomic.Int64
	st := closedLoop(ctx, conc, dur, "writes", func(ctx context.Context, w, i int) error {
		n := seq.Add(1)
		r := rec{Type: "bench", Name: fmt.Sprintf("name-%05d", n%10000), Alloc: fmt.Sprintf("%s-%07d", tag, n)}
		if err := ws.cs[w].register(ctx, r); err != nil {
			return err
		}
		mu.Lock()
		done = append(done, r)
		mu.Unlock()
		return nil
	})
	st.Writes = st.Ops
	return st, done
}

// deregisterCell removes the instances registerCell registered, until
// they run out or dur passes.
func deregisterCell(ctx context.Context, ws *clientPool[writer], conc int, dur time.Duration, todo []rec) stats {
	var next atomic.Int64
	st := closedLoop(ctx, conc, dur, "writes", func(ctx context.Context, w, i int) error {
		k := int(next.Add(1)) - 1
		if k >= len(todo) {
			return errExhausted
		}
		return ws.cs[w].deregister(ctx, todo[k])
	})
	st.Writes = st.Ops
	return st
}

// listCell lists the 1,000 names of type "list" through readers that all
// talk to one follower.
func listCell(ctx context.Context, rs *clientPool[reader], conc int, dur time.Duration, stale bool) stats {
	return closedLoop(ctx, conc, dur, "lists", func(ctx context.Context, w, i int) error {
		n, err := rs.cs[w].list(ctx, "list", stale)
		if err != nil {
			return err
		}
		if n != listNames {
			return fmt.Errorf("list returned %d instances, want %d", n, listNames)
		}
		return nil
	})
}

const listNames = 1000

// populateList registers the 1,000 names of type "list" (one instance
// each) that the list workload reads.
func populateList(ctx context.Context, s system) error {
	ws, err := newWriters(s, 32, 0)
	if err != nil {
		return err
	}
	defer ws.close()
	var next atomic.Int64
	st := closedLoop(ctx, 32, time.Hour, "writes", func(ctx context.Context, w, i int) error {
		k := int(next.Add(1)) - 1
		if k >= listNames {
			return errExhausted
		}
		return ws.cs[w].register(ctx, rec{Type: "list", Name: fmt.Sprintf("name-%04d", k), Alloc: "a1"})
	})
	if st.Errors > 0 {
		return fmt.Errorf("%s: populate list: %d errors (first: %s)", s.name(), st.Errors, st.FirstErr)
	}
	return nil
}

// watchCell measures delivery latency: conc writers register fresh
// instances of type "watch" while nWatchers watchers (spread over the
// nodes) watch the type. Each delivery's latency runs from the start of
// the write to the watcher's receipt; every watcher must receive every
// acknowledged write.
func watchCell(ctx context.Context, s system, ws *clientPool[writer], conc, nWatchers int, dur time.Duration, tag string) (stats, error) {
	var starts sync.Map // alloc -> time.Time, set before the write is sent
	type watcherState struct {
		mu  sync.Mutex
		lat []time.Duration
		got map[string]bool
	}
	wst := make([]*watcherState, nWatchers)
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for k := 0; k < nWatchers; k++ {
		st := &watcherState{got: map[string]bool{}}
		wst[k] = st
		stop, err := s.watch(ctx, k%members, "watch", func(alloc string) {
			now := time.Now()
			st.mu.Lock()
			defer st.mu.Unlock()
			if t0, ok := starts.Load(alloc); ok {
				st.lat = append(st.lat, now.Sub(t0.(time.Time)))
			} else {
				st.got[alloc] = true // the sync write
			}
		})
		if err != nil {
			return stats{}, fmt.Errorf("%s watcher %d: %w", s.name(), k, err)
		}
		stops = append(stops, stop)
	}
	// Every watcher is live once it has seen a write made after it
	// started; plugreg's stream is only known to be open by its first line.
	syncAlloc := fmt.Sprintf("%s-sync", tag)
	if err := ws.cs[0].register(ctx, rec{Type: "watch", Name: "sync", Alloc: syncAlloc}); err != nil {
		return stats{}, fmt.Errorf("%s watch sync write: %w", s.name(), err)
	}
	if !waitFor(ctx, 30*time.Second, func() bool {
		for _, st := range wst {
			st.mu.Lock()
			ok := st.got[syncAlloc]
			st.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	}) {
		return stats{}, fmt.Errorf("%s: watchers did not all see the sync write", s.name())
	}

	var mu sync.Mutex
	var acked []string
	var seq atomic.Int64
	wstats := closedLoop(ctx, conc, dur, "writes", func(ctx context.Context, w, i int) error {
		n := seq.Add(1)
		r := rec{Type: "watch", Name: fmt.Sprintf("name-%04d", n%1000), Alloc: fmt.Sprintf("%s-%07d", tag, n)}
		starts.Store(r.Alloc, time.Now())
		if err := ws.cs[w].register(ctx, r); err != nil {
			return err
		}
		mu.Lock()
		acked = append(acked, r.Alloc)
		mu.Unlock()
		return nil
	})
	// Let the last deliveries arrive. Counting is enough: a watcher
	// records a latency only for writes the bench made, once each.
	complete := func() bool {
		for _, st := range wst {
			st.mu.Lock()
			n := len(st.lat)
			st.mu.Unlock()
			if n < len(acked) {
				return false
			}
		}
		return true
	}
	waitFor(ctx, 20*time.Second, complete)
	var all []time.Duration
	missed := 0
	for _, st := range wst {
		st.mu.Lock()
		missed += max(0, len(acked)-len(st.lat))
		all = append(all, st.lat...)
		st.mu.Unlock()
	}
	out := summarize(all, wstats.Errors, time.Duration(wstats.Seconds*float64(time.Second)), "deliveries")
	out.Missed = missed
	out.Writes = wstats.Ops
	out.FirstErr = wstats.FirstErr
	return out, nil
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
