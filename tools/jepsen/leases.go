package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// leaseHolders hold leased registrations (type check.LeaseType) through
// the run, as a scheduler's holder would with client.KeepAlive: each
// registers an instance with a TTL, renews it every third of the TTL
// through one agent (the next one after a failure) for a few seconds,
// then lets it go, by deregistering it one time in three and otherwise by
// no longer renewing it, and takes a new instance. A renewal answered 404
// (the lease is gone) makes it take a new one at once. One holder in three
// renews as users of the Go client do, with client.KeepAlive (its
// renewals noted off the wire by renewTap); the others send each renewal
// themselves. Everything is recorded for check.Leases; the registrations
// and deregistrations are also the history's writes.
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
	var (
		kc  *client.Client
		tap *renewTap
	)
	if h.goClient(id) {
		var err error
		if kc, tap, err = h.newKeepAliveClient(id); err != nil {
			w.db.logf("lease holder %d: %v; it renews by hand instead", id, err)
		}
	}
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
		if kc != nil {
			h.keepAlive(ctx, holdUntil, &l, kc, tap)
		} else {
			at = h.renewUntil(ctx, holdUntil, &l, renewals, at)
		}
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

// goClient reports whether holder id renews with client.KeepAlive.
func (h *leaseHolders) goClient(id int) bool { return !h.unsafe && id%3 == 2 }

// renewUntil renews l every third of the TTL through hosts[at] (the next
// host after a failure) until holdUntil, ctx's end, or a 404 (l.Lost),
// and returns the host it got to.
func (h *leaseHolders) renewUntil(ctx context.Context, holdUntil time.Time, l *check.Lease, hc *http.Client, at int) int {
	hosts := h.w.db.hosts
	tick := time.NewTicker(h.ttl / 3)
	for ctx.Err() == nil && time.Now().Before(holdUntil) {
		select {
		case <-ctx.Done():
			continue
		case <-tick.C:
		}
		op, status := h.renew(hc, hosts[at], l)
		l.Renewals = append(l.Renewals, op)
		if status == http.StatusNotFound {
			l.Lost = op.End
			break
		}
		if op.Outcome != check.OK {
			at = (at + 1) % len(hosts)
		}
	}
	tick.Stop()
	return at
}

// keepAlive holds l with the Go client's KeepAlive until holdUntil or
// ctx's end; a lease it reports gone is lost (l.Lost).
func (h *leaseHolders) keepAlive(ctx context.Context, holdUntil time.Time, l *check.Lease, c *client.Client, tap *renewTap) {
	hctx, cancel := context.WithDeadline(ctx, holdUntil)
	defer cancel()
	err := c.KeepAlive(hctx, check.LeaseType, l.Name, l.Alloc, 0)
	l.Renewals = tap.take()
	if errors.Is(err, api.ErrNotFound) {
		l.Lost = h.w.clock()
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

// newKeepAliveClient is holder id's Go client: every agent's address (a
// client agent's too), its renewals noted by a renewTap.
func (h *leaseHolders) newKeepAliveClient(id int) (*client.Client, *renewTap, error) {
	var addrs []string
	names := map[string]string{}
	for _, n := range h.w.db.hosts {
		addrs = append(addrs, n.HTTP)
		names[n.HTTP] = n.Name
	}
	tap := &renewTap{base: clientFrom(clientIP, 2*time.Second).Transport, clock: h.w.clock, names: names, process: 3000 + id}
	c, err := client.New(client.Config{Addrs: addrs, HTTPClient: &http.Client{Transport: tap}})
	return c, tap, err
}

// renewTap is a Go-client holder's transport: it lets every request
// through and notes each renewal (a PUT .../renew) as a check.Op, from
// the request's start to its answer; take hands them over.
type renewTap struct {
	base    http.RoundTripper
	clock   func() int64
	names   map[string]string // host:port -> agent
	process int

	mu  sync.Mutex // guards ops
	ops []check.Op
}

func (t *renewTap) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || !strings.HasSuffix(req.URL.Path, "/renew") {
		return t.base.RoundTrip(req)
	}
	op := check.Op{Process: t.process, Node: t.names[req.URL.Host], F: check.FRenew, Type: check.LeaseType, Start: t.clock()}
	if parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/v1/plugins/"), "/"); len(parts) == 4 {
		op.Name, op.Alloc = parts[1], parts[2]
	}
	resp, err := t.base.RoundTrip(req)
	op.End = t.clock()
	switch {
	case err != nil:
		op.Outcome, op.Error = check.Unknown, err.Error()
	case resp.StatusCode == http.StatusOK:
		op.Outcome = check.OK
	default:
		op.Outcome, op.Error = check.Fail, resp.Status
	}
	t.mu.Lock()
	t.ops = append(t.ops, op)
	t.mu.Unlock()
	return resp, err
}

// take returns the renewals noted since the last take.
func (t *renewTap) take() []check.Op {
	t.mu.Lock()
	defer t.mu.Unlock()
	ops := t.ops
	t.ops = nil
	return ops
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
