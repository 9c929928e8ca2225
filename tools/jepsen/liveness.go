package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// livenessBound is how long, after the final heal, a write through each
// node has to succeed and be applied on every node.
const livenessBound = 30 * time.Second

// probeType is the plugin type of the liveness writes: a type of their
// own, so that they touch none of the workload's keys.
const probeType = "live"

// liveness is what the final write through each node found.
type liveness struct {
	violations []check.Violation
	maxIndex   uint64 // the highest index a probe write was acknowledged at
}

// checkLiveness registers a fresh plugin through each agent's HTTP API
// (servers and client agents), as a user would, and requires each write to
// succeed and to be visible on every server (a stale read of the server's
// own state) within livenessBound; through a client agent, a linearizable
// read of its write must then succeed through it as well. A node that
// cannot write, or that never applies the others' writes, is named. The
// probes are recorded like any other operation, so the safety checkers see
// them too.
func checkLiveness(ctx context.Context, w *workload, logf func(string, ...interface{})) liveness {
	var (
		res liveness
		mu  sync.Mutex
		wg  sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(ctx, livenessBound)
	defer cancel()
	for i := range w.db.hosts {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			idx, vs := probe(ctx, w, i)
			mu.Lock()
			defer mu.Unlock()
			res.maxIndex = max(res.maxIndex, idx)
			res.violations = append(res.violations, vs...)
		}(i)
	}
	wg.Wait()
	sort.Slice(res.violations, func(a, b int) bool { return res.violations[a].Detail < res.violations[b].Detail })
	logf("liveness: a write through every agent, applied everywhere (and read back through each client agent): %v (%d violations)", len(res.violations) == 0, len(res.violations))
	return res
}

// probe writes through agent i until a write succeeds (each attempt a new
// request, recorded), then waits until every server shows it; through a
// client agent, it then reads the write back through it, linearizably.
func probe(ctx context.Context, w *workload, i int) (uint64, []check.Violation) {
	n := w.db.hosts[i]
	hc := clientFrom(clientIP, 5*time.Second)
	var op check.Op
	for attempt := 0; ; attempt++ {
		op = check.Op{Process: 1000 + i, Node: n.Name, F: check.FRegister, Type: probeType, Name: "after-heal", Alloc: n.Name,
			Value: fmt.Sprintf("via-%s-%d", n.Name, attempt), RequestID: fmt.Sprintf("s%d-live-%s-%d", w.seed, n.Name, attempt)}
		w.do(ctx, hc, n.HTTP, &op)
		w.rec.add(op)
		if op.Outcome == check.OK {
			break
		}
		select {
		case <-ctx.Done():
			return 0, []check.Violation{{Checker: "liveness", Detail: fmt.Sprintf("no write through %s succeeded within %v of the final heal (%d attempts; the last: %s %s)",
				n.Name, livenessBound, attempt+1, op.Outcome, op.Error)}}
		case <-time.After(500 * time.Millisecond):
		}
	}
	// Visible everywhere: each node's own state, read stale, has it.
	missing := map[int]bool{}
	for j := range w.db.nodes {
		missing[j] = true
	}
	for len(missing) > 0 {
		for j := range missing {
			if v, err := staleGet(ctx, w.db, j, op.Type, op.Name, op.Alloc); err == nil && v == op.Value {
				delete(missing, j)
			}
		}
		if len(missing) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			var vs []check.Violation
			for j := range missing {
				at := "unreachable"
				if h, err := w.db.health(context.Background(), j); err == nil {
					at = fmt.Sprintf("at applied index %d", h.AppliedIndex)
				}
				vs = append(vs, check.Violation{Checker: "liveness", Detail: fmt.Sprintf("%s did not apply the write through %s (index %d) within %v of the final heal (%s)",
					w.db.nodes[j].Name, n.Name, op.Index, livenessBound, at)})
			}
			return op.Index, vs
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !n.Client {
		return op.Index, nil
	}
	// Read back through the client agent: a linearizable read that must
	// succeed and see the write (the reads checker checks its index too).
	var rd check.Op
	for attempt := 0; ; attempt++ {
		rd = check.Op{Process: 1000 + i, Node: n.Name, F: check.FGet, Type: op.Type, Name: op.Name, Alloc: op.Alloc}
		w.do(ctx, hc, n.HTTP, &rd)
		w.rec.add(rd)
		if rd.Outcome == check.OK {
			if !rd.Found || rd.Got != op.Value {
				return op.Index, []check.Violation{{Checker: "liveness", Detail: fmt.Sprintf("a linearizable read through %s after its write %s (index %d) returned (%q, found %v)",
					n.Name, op.Value, op.Index, rd.Got, rd.Found)}}
			}
			return op.Index, nil
		}
		select {
		case <-ctx.Done():
			return op.Index, []check.Violation{{Checker: "liveness", Detail: fmt.Sprintf("no linearizable read through %s succeeded within %v of the final heal (%d attempts; the last: %s %s)",
				n.Name, livenessBound, attempt+1, rd.Outcome, rd.Error)}}
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// clientRead is one linearizable read through client agent j, recorded
// like any other operation (process 3000+j): a get of a key of the probe
// type that only the liveness writes touch.
func (w *workload) clientRead(ctx context.Context, j int) check.Op {
	c := w.db.clients[j]
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	op := check.Op{Process: 3000 + j, Node: c.Name, F: check.FGet, Type: probeType, Name: "after-fault", Alloc: c.Name}
	w.do(ctx, w.db.hc, c.HTTP, &op)
	w.rec.add(op)
	return op
}

// staleGet reads one plugin instance's version from node i's own state.
func staleGet(ctx context.Context, d *db, i int, typ, name, alloc string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var p struct{ Version string }
	path := "/v1/plugins/" + strings.Join([]string{typ, name, alloc}, "/")
	if found, err := staleRead(ctx, d, d.nodes[i].HTTP, path, &p); err != nil || !found {
		return "", errors.Join(err, errNotFound(found, path))
	}
	return p.Version, nil
}
