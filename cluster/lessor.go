package cluster

import (
	"container/heap"
	"fmt"
	"golang.org/x/time/rate"
	"sync"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// The lessor keeps the leases of leased instances (a registration's TTL,
// api/lease.go) on the leader, in memory, as etcd's lessor does. A
// renewal moves a deadline and never touches the log; only expiries do,
// one ExpireCommand entry per batch, at a bounded rate. Followers hold
// nothing: a leader that takes office starts every lease afresh, a full
// TTL from the moment it can take renewals, so an election never expires
// a lease whose holder keeps renewing (at the price of giving the
// instance of a holder that died up to one TTL more, plus the election).
//
// What is leased is the replicated state's business (PluginInfo.TTL): the
// lessor starts from the state at the start of its term and follows the
// leader's own event stream (registrations and updates start or end a
// lease, deregistrations and expiries end one). The deadlines are its
// own. Every method is safe from any goroutine.
type lessor struct {
	now func() time.Time

	mu     sync.Mutex
	leases map[leaseKey]*lease
	queue  leaseQueue // leases not under expiry, soonest deadline first
	budget expiryBudget
}

type leaseKey struct{ typ, name, alloc string }

func leaseKeyOf(p *api.PluginInfo) leaseKey { return leaseKey{p.Type, p.Name, p.AllocID} }

// lease is one leased registration: the instance at ModifyIndex.
type lease struct {
	key         leaseKey
	ttl         time.Duration
	node        string // the instance's NodeID, for node-bound renewals
	modifyIndex uint64
	deadline    time.Time
	// expiring: in an ExpireCommand under way, off the queue. Its
	// renewal is refused: the expiry was decided.
	expiring bool
	pos      int // in queue; -1 off it
}

// newLessor returns a lessor that expires at most rate instances a second,
// in batches of at most rate*tick (at least one; at most
// fsm.MaxExpireBatch), when due is called every tick.
func newLessor(now func() time.Time, rate int, tick time.Duration) *lessor {
	l := &lessor{now: now, leases: map[leaseKey]*lease{}}
	l.budget = newExpiryBudget(rate, tick, now())
	return l
}

// grantAll starts a lease for every leased instance of st, a full TTL from
// now: what a leader that takes office does.
func (l *lessor) grantAll(st *fsm.State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	st.WalkLeased(func(p *api.PluginInfo) bool {
		l.put(p, now)
		return true
	})
}

// observe follows one of the leader's events.
func (l *lessor) observe(ev *api.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev.EventType {
	case api.EventRegistered, api.EventUpdated, api.EventDeregistered, api.EventExpired:
		k := leaseKeyOf(ev.Info)
		starts := (ev.EventType == api.EventRegistered || ev.EventType == api.EventUpdated) && ev.Info.TTL != 0
		// The lessor may hold this registration's lease already, or a
		// later one's: a renewal found it in the leader's state, which
		// is ahead of the events read here. Older news changes nothing.
		if cur := l.leases[k]; cur != nil && (cur.modifyIndex > ev.Info.ModifyIndex || starts && cur.modifyIndex == ev.Info.ModifyIndex) {
			return
		}
		l.remove(k)
		if starts {
			l.put(ev.Info, l.now())
		}
	case api.EventHealth:
		// Health is no renewal: the lease keeps its deadline, and
		// follows the registration's new ModifyIndex (the expiry's
		// condition), or the instance would never expire.
		if cur := l.leases[leaseKeyOf(ev.Info)]; cur != nil && cur.modifyIndex < ev.Info.ModifyIndex {
			cur.modifyIndex = ev.Info.ModifyIndex
			if cur.expiring {
				// The expiry in flight names the old index: the
				// entry will skip the instance (events come in log
				// order, so it is not applied yet). Due again.
				cur.expiring = false
				heap.Push(&l.queue, cur)
			}
		}
	case api.EventReset:
		// The journal could not give the events (this node restored a
		// snapshot, or the lessor fell behind): the reset is the whole
		// state. Leases of registrations it still holds run on; the
		// others start afresh or end.
		keep := make(map[leaseKey]bool, len(l.leases))
		now := l.now()
		for _, p := range ev.Plugins {
			if p.TTL == 0 {
				continue
			}
			k := leaseKeyOf(p)
			keep[k] = true
			if cur := l.leases[k]; cur == nil || cur.modifyIndex != p.ModifyIndex {
				l.remove(k)
				l.put(p, now)
			}
		}
		for k := range l.leases {
			if !keep[k] {
				l.remove(k)
			}
		}
	}
}

// renew moves the lease of req's instance to now plus its TTL. An
// instance the lessor has not heard of yet is looked up in st (the
// leader's applied state, which may be ahead of the events the lessor has
// read): a registration acknowledged a moment ago is renewable at once.
func (l *lessor) renew(req api.RenewRequest, st *fsm.State) (api.RenewResult, error) {
	what := fmt.Sprintf("renew %s/%s/%s", req.Type, req.Name, req.AllocID)
	l.mu.Lock()
	defer l.mu.Unlock()
	k := leaseKey{req.Type, req.Name, req.AllocID}
	cur := l.leases[k]
	if cur == nil {
		p := st.Instance(req.Type, req.Name, req.AllocID)
		switch {
		case p == nil:
			return api.RenewResult{}, fmt.Errorf("%s: %w: no such instance (it expired, or was deregistered)", what, api.ErrNotFound)
		case p.TTL == 0:
			return api.RenewResult{}, fmt.Errorf("%s: %w: it was registered without a TTL and has no lease", what, api.ErrNotFound)
		}
		cur = l.put(p, l.now())
	}
	if cur.expiring {
		return api.RenewResult{}, fmt.Errorf("%s: %w: its lease ran out and its expiry is under way; register it again", what, api.ErrNotFound)
	}
	if req.IfNodeID != "" && cur.node != req.IfNodeID {
		return api.RenewResult{}, fmt.Errorf("%s: %w: it belongs to node %q, not %q", what, api.ErrConflict, cur.node, req.IfNodeID)
	}
	cur.deadline = l.now().Add(cur.ttl)
	heap.Fix(&l.queue, cur.pos)
	return api.RenewResult{TTL: api.Duration(cur.ttl)}, nil
}

// anyDue reports whether a lease's deadline has passed.
func (l *lessor) anyDue() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queue.Len() > 0 && !l.queue[0].deadline.After(l.now())
}

// due takes the leases whose deadline has passed, soonest first, as many
// as the budget allows, and marks them expiring: the batch of one
// ExpireCommand. The caller proposes it and reports with settled.
func (l *lessor) due() []fsm.ExpiredLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var out []fsm.ExpiredLease
	l.budget.take(now, func(max int) int {
		for len(out) < max && l.queue.Len() > 0 && !l.queue[0].deadline.After(now) {
			ls := heap.Pop(&l.queue).(*lease)
			ls.expiring = true
			out = append(out, fsm.ExpiredLease{Type: ls.key.typ, Name: ls.key.name, AllocID: ls.key.alloc, ModifyIndex: ls.modifyIndex})
		}
		return len(out)
	})
	return out
}

// settled reports how the expiry of batch ended. Applied (err nil): its
// leases are over, whatever the entry found (an instance it skipped was
// registered again, and that registration's event starts its new lease).
// Failed: its leases go back on the queue, due again at the next tick.
func (l *lessor) settled(batch []fsm.ExpiredLease, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range batch {
		k := leaseKey{e.Type, e.Name, e.AllocID}
		cur := l.leases[k]
		if cur == nil || !cur.expiring || cur.modifyIndex != e.ModifyIndex {
			continue // an event replaced or ended it meanwhile
		}
		if err == nil {
			delete(l.leases, k)
			continue
		}
		cur.expiring = false
		heap.Push(&l.queue, cur)
	}
}

// len is the number of leases held.
func (l *lessor) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.leases)
}

// put starts the lease of p's registration, a full TTL from now,
// replacing any lease of its instance. Callers hold mu.
func (l *lessor) put(p *api.PluginInfo, now time.Time) *lease {
	k := leaseKeyOf(p)
	l.remove(k)
	ls := &lease{key: k, ttl: time.Duration(p.TTL), node: p.NodeID, modifyIndex: p.ModifyIndex, deadline: now.Add(time.Duration(p.TTL))}
	l.leases[k] = ls
	heap.Push(&l.queue, ls)
	return ls
}

// remove ends the lease of k, if any. Callers hold mu.
func (l *lessor) remove(k leaseKey) {
	ls := l.leases[k]
	if ls == nil {
		return
	}
	delete(l.leases, k)
	if !ls.expiring {
		heap.Remove(&l.queue, ls.pos)
	}
}

// leaseQueue is a min-heap of leases by deadline (container/heap).
type leaseQueue []*lease

func (q leaseQueue) Len() int           { return len(q) }
func (q leaseQueue) Less(i, j int) bool { return q[i].deadline.Before(q[j].deadline) }
func (q leaseQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].pos, q[j].pos = i, j
}
func (q *leaseQueue) Push(x any) {
	ls := x.(*lease)
	ls.pos = len(*q)
	*q = append(*q, ls)
}
func (q *leaseQueue) Pop() any {
	old := *q
	ls := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	ls.pos = -1
	return ls
}

// expiryBudget bounds how fast leases expire: a token bucket of rate
// tokens a second holding at most one batch (rate*tick, at least one, at
// most fsm.MaxExpireBatch). A mass expiry (a rack of holders gone, a
// cluster restored from an old backup) becomes one modest entry per tick
// instead of a flood of entries, or one huge one, that would hold up every
// other write; etcd bounds its lease revocations the same way
// (leaseRevokeRate, 1000 a second).
type expiryBudget struct {
	lim *rate.Limiter // x/time/rate's bucket, asked at the lessor's clock
}

func newExpiryBudget(r int, tick time.Duration, now time.Time) expiryBudget {
	batch := min(max(1, int(float64(r)*tick.Seconds())), fsm.MaxExpireBatch)
	lim := rate.NewLimiter(rate.Limit(r), batch)
	lim.AllowN(now, 0) // the clock starts now, the bucket full
	return expiryBudget{lim: lim}
}

// take lets use take up to what the bucket holds at now (a whole number,
// at most one batch); use returns how many it took.
func (b *expiryBudget) take(now time.Time, use func(max int) int) int {
	n := use(int(b.lim.TokensAt(now)))
	if n > 0 {
		b.lim.AllowN(now, n)
	}
	return n
}
