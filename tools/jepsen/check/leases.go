package check

import (
	"fmt"
	"sort"
	"time"
)

// LeaseType is the type of the lease holders' registrations
// (tools/jepsen/leases.go): registered with a TTL, renewed, let go, expired.
const LeaseType = "jlease"

// FRenew is a lease renewal. Renewals never reach the log: they are kept
// in their Lease, not among the history's ops.
const FRenew = "renew"

// Lease is one leased instance as its holder saw it: the registration
// (also among the history's ops, where the writes checker checks it), its
// renewals in order, and when the holder let it go.
type Lease struct {
	Holder      int
	Name, Alloc string
	TTL         int64 // ns
	Register    Op
	Renewals    []Op
	// Released is when the holder stopped renewing (its hold ended, or
	// the workload did), Lost when a renewal was answered 404 (it then
	// takes a new instance): from either on, nothing renews it.
	Released, Lost int64
	Deregister     *Op `json:",omitempty"` // how the holder let it go, if not by expiry
}

// LeaseStats is what the lease checker measured.
type LeaseStats struct {
	Leases, Applied           int
	RenewOK, RenewFail        int
	Expired, ExpiredWhileHeld int // ExpiredWhileHeld: before the holder let go (its renewals failed for a TTL)
	Untimed                   int // expired, but no subscriber saw the event (a reset covered it)
	Lost, Deregistered        int
	// Lag is, for each timed expiry, from the deadline the holder's
	// acknowledged operations set at least (the start of the last one
	// before the expiry plus the TTL) to the first subscriber that saw
	// the expired event: how late the cluster removed it, at most.
	Lag []time.Duration
}

// Leases checks the leased instances against the ground truth and the
// subscribers' events:
//   - never before the deadline: no instance expires before the TTL has
//     run from the start of its registration or of a renewal that was
//     acknowledged (the leader's clock runs the TTL from when it took
//     them, which is later). The expiry's time is bounded above by the
//     first subscriber that saw its expired event.
//   - no renewal is acknowledged that was sent after the instance's
//     expiry was seen: a holder must not believe in a lease that is gone.
//   - every lease ends: at the final index (0: unknown, skipped) no
//     instance of a lease remains, since every holder let go before the
//     end.
func Leases(leases []Lease, sessions []Session, t *Truth, final uint64) ([]Violation, LeaseStats) {
	var (
		vs    []Violation
		st    LeaseStats
		key   = func(name, alloc string) string { return name + "/" + alloc }
		seen  = map[string]int64{}  // instance -> first time a subscriber saw it expire
		index = map[string]uint64{} // instance -> its expiry's index
		regAt = map[string]uint64{} // registration request ID -> applied index
	)
	for _, e := range t.Events {
		if e.EventType == "expired" && e.Info.Type == LeaseType {
			if _, ok := index[key(e.Info.Name, e.Info.Alloc)]; !ok {
				index[key(e.Info.Name, e.Info.Alloc)] = e.Index
			}
		}
	}
	for _, s := range sessions {
		for _, ev := range s.Events {
			if ev.EventType != "expired" || ev.Info == nil || ev.Info.Type != LeaseType {
				continue
			}
			k := key(ev.Info.Name, ev.Info.Alloc)
			if at, ok := seen[k]; !ok || ev.At < at {
				seen[k] = ev.At
			}
		}
	}
	for _, e := range t.Entries {
		if e.Kind == "command" && (e.Command == "register" || e.Command == "conditional-register") && e.RequestID != "" && !e.Duplicate && e.Error == "" {
			if _, ok := regAt[e.RequestID]; !ok {
				regAt[e.RequestID] = e.Index
			}
		}
	}
	var finalState *Registry
	if final > 0 {
		finalState = t.StateAt(final)
	}
	sec := func(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }
	for i := range leases {
		l := &leases[i]
		st.Leases++
		k := key(l.Name, l.Alloc)
		what := fmt.Sprintf("lease %s/%s (holder %d, TTL %v)", LeaseType, k, l.Holder, time.Duration(l.TTL))
		if l.Lost > 0 {
			st.Lost++
		}
		if l.Deregister != nil && l.Deregister.Outcome == OK {
			st.Deregistered++
		}
		for _, r := range l.Renewals {
			if r.Outcome == OK {
				st.RenewOK++
			} else {
				st.RenewFail++
			}
		}
		regIndex, applied := regAt[l.Register.RequestID]
		if !applied {
			continue
		}
		st.Applied++
		if _, expired := index[k]; expired {
			st.Expired++
			at, timed := seen[k]
			if !timed {
				st.Untimed++
			} else {
				// The latest deadline the cluster must have granted
				// before the expiry was seen: from the start of the
				// registration (it was applied) or of an acknowledged
				// renewal, whichever came last. (One sent after it is
				// the violation below.)
				from, fromWhat := l.Register.Start, "registration"
				for _, r := range l.Renewals {
					if r.Outcome == OK && r.Start > from && r.Start < at {
						from, fromWhat = r.Start, "renewal"
					}
				}
				if at < from+l.TTL {
					vs = append(vs, violation("leases", "%s expired by %s, before its deadline: a %s sent at %s was acknowledged, so it held until %s at least",
						what, sec(at), fromWhat, sec(from), sec(from+l.TTL)))
				}
				if l.Lost > 0 || at < l.Released {
					st.ExpiredWhileHeld++ // a lost lease was lost to this expiry
				}
				st.Lag = append(st.Lag, time.Duration(at-(from+l.TTL)))
				for _, r := range l.Renewals {
					if r.Outcome == OK && r.Start > at {
						vs = append(vs, violation("leases", "%s: a renewal sent at %s through %s was acknowledged, but its expiry (index %d) was seen at %s",
							what, sec(r.Start), r.Node, index[k], sec(at)))
					}
				}
			}
		}
		if finalState != nil && regIndex <= final {
			if _, ok := finalState.Get(LeaseType, l.Name, l.Alloc); ok {
				vs = append(vs, violation("leases", "%s is still registered at the end (index %d), though its holder let go at %s",
					what, final, sec(max(l.Released, l.Lost))))
			}
		}
	}
	sort.Slice(st.Lag, func(i, j int) bool { return st.Lag[i] < st.Lag[j] })
	return vs, st
}
