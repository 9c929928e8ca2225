package main

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"sync"
	"time"

	"github.com/plugreg/plugreg/jepsen/check"
)

// leaseHolders hold leased registrations (type check.LeaseType) through
// the run, as a scheduler's holder would with client.KeepAlive: each
// registers an instance with a TTL, renews it every third of the TTL
// through one agent (the next one after a failure) for a few seconds,
// then lets it go, by deregistering it one time in three and otherwise by
// no longer renewing it, and takes a new instance. A renewal answered 404
// (the lease is gone) makes it take a new one at once. Everything is
// recorded for check.Leases; the registrations and deregistrations are
// also the history's writes.
type leaseHolders struct {
	w   *workload
	n   int
	ttl time.Duration
	// unsafe (-unsafe-lease-renewals) records every renewal as
	// acknowledged without sending it: the leases expire while the
	// history says they were renewed, and the checker must object.
	unsafe bool

	mu     sync.Mutex // guards leases
	leases []check.Lease
}

func (h *leaseHolders) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < h.n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			h.hold(ctx, i)
		}(i)
	}
	wg.Wait()
}

// recorded returns every lease the holders took.
func (h *leaseHolders) recorded() []check.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]check.Lease(nil), h.leases...)
}

// hold is holder id until ctx ends (then it lets its lease go).
func (h *leaseHolders) hold(ctx context.Context, id int) {
	w := h.w
	rng := rand.New(rand.NewSource(w.seed*7919 + int64(id)))
	writes := clientFrom(clientIP, 2*time.Second)
	// A renewal that takes longer than its turn has missed it.
	renewals := clientFrom(clientIP, h.ttl/3)
	hosts := w.db.hosts
	at := id % len(hosts)
	next := func() { at = (at + 1) % len(hosts) }
	for gen := 0; ctx.Err() == nil; gen++ {
		l := check.Lease{Holder: id, Name: fmt.Sprintf("l%d", id), Alloc: fmt.Sprintf("g%d", gen), TTL: int64(h.ttl)}
		l.Register = check.Op{Process: 3000 + id, Node: hosts[at].Name, F: check.FRegister, Type: check.LeaseType, Name: l.Name, Alloc: l.Alloc,
			Value: fmt.Sprintf("lease%d-%d", id, gen), RequestID: fmt.Sprintf("s%d-lease%d-%d", w.seed, id, gen), TTL: h.ttl.String()}
		w.do(ctx, writes, hosts[at].HTTP, &l.Register)
		w.rec.add(l.Register)
		if l.Register.Outcome != check.OK {
			// It may have been applied (unknown): nobody renews it, so
			// the cluster must expire it.
			l.Released = w.clock()
			h.add(l)
			next()
			sleepCtx(ctx, h.ttl/3)
			continue
		}
		holdUntil := time.Now().Add(time.Duration(2000+rng.Intn(10000)) * time.Millisecond)
		tick := time.NewTicker(h.ttl / 3)
		for ctx.Err() == nil && time.Now().Before(holdUntil) {
			select {
			case <-ctx.Done():
				continue
			case <-tick.C:
			}
			op, status := h.renew(renewals, hosts[at], &l)
			l.Renewals = append(l.Renewals, op)
			if status == http.StatusNotFound {
				l.Lost = op.End
				break
			}
			if op.Outcome != check.OK {
				next()
			}
		}
		tick.Stop()
		if l.Lost == 0 {
			l.Released = w.clock()
			if rng.Intn(3) == 0 && ctx.Err() == nil {
				d := check.Op{Process: 3000 + id, Node: hosts[at].Name, F: check.FDeregister, Type: check.LeaseType, Name: l.Name, Alloc: l.Alloc,
					RequestID: fmt.Sprintf("s%d-lease%d-%d-d", w.seed, id, gen)}
				w.do(ctx, writes, hosts[at].HTTP, &d)
				w.rec.add(d)
				l.Deregister = &d
			}
		}
		h.add(l)
	}
}

func (h *leaseHolders) add(l check.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leases = append(h.leases, l)
}

// renew renews l's lease once through n, and says how it was answered
// (0: no answer).
func (h *leaseHolders) renew(hc *http.Client, n *node, l *check.Lease) (check.Op, int) {
	w := h.w
	op := check.Op{Process: 3000 + l.Holder, Node: n.Name, F: check.FRenew, Type: check.LeaseType, Name: l.Name, Alloc: l.Alloc, Start: w.clock()}
	if h.unsafe {
		op.End, op.Outcome = op.Start, check.OK
		return op, http.StatusOK
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+n.HTTP+"/v1/plugins/"+check.LeaseType+"/"+l.Name+"/"+l.Alloc+"/renew", nil)
	resp, err := hc.Do(req)
	if err != nil {
		op.End, op.Outcome, op.Error = w.clock(), check.Unknown, err.Error()
		return op, 0
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	op.End = w.clock()
	if resp.StatusCode == http.StatusOK {
		op.Outcome = check.OK
	} else {
		op.Outcome, op.Error = check.Fail, fmt.Sprintf("%s: %s", resp.Status, b)
	}
	return op, resp.StatusCode
}

// awaitExpiry waits up to bound, after the final heal, until no server
// holds a lease instance any more (every holder let go when the workload
// stopped), and says how long that took.
func (h *leaseHolders) awaitExpiry(ctx context.Context, bound time.Duration) (time.Duration, bool) {
	t0 := time.Now()
	for time.Since(t0) < bound {
		if h.noneLeft(ctx) {
			return time.Since(t0), true
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return time.Since(t0), false
}

// noneLeft reports whether every server's own state has no lease instance.
func (h *leaseHolders) noneLeft(ctx context.Context) bool {
	for _, n := range h.w.db.nodes {
		var ps []struct{ Name string }
		found, err := staleRead(ctx, h.w.db, n.HTTP, "/v1/plugins/"+check.LeaseType, &ps)
		if err != nil || (found && len(ps) > 0) {
			return false
		}
	}
	return true
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
