package fsm

import (
	"fmt"

	"github.com/plugreg/plugreg/api"
)

// ExpireCommand removes leased instances whose leases ran out: the
// leader's lessor (cluster/lessor.go) proposes one entry per batch, never
// one per instance, so a mass expiry costs the log few entries. Each
// instance is removed only if it is still the registration whose lease
// ran out (the same ModifyIndex, still leased): a re-registration
// ordered before the entry wins, as a conditional deregister's condition
// does. A new type, for the reason ConditionalDeregisterCommand is one:
// binaries older than it cannot apply it and panic rather than diverge,
// so every server must run a release that knows it before a registration
// carries a TTL (docs/operations.md; the lessor proposes none while a
// server of the configuration does not say it knows leases).
const ExpireCommand CommandType = 9

// MaxExpireBatch bounds the instances of one ExpireRequest, and so its
// entry (at most ~800 bytes an instance).
const MaxExpireBatch = 1024

// ResultExpired answers an ExpireRequest that removed at least one
// instance (ApplyResult.Removed says how many); one that removed none is
// api.ResultAbsent. Only the leader's lessor sees it.
const ResultExpired api.Result = "expired"

// ExpireRequest is an ExpireCommand. It carries no request ID: the
// lessor retries by proposing again, and the condition makes a repeat
// change nothing.
type ExpireRequest struct {
	Leases []ExpiredLease
}

// ExpiredLease names an instance whose lease ran out, and the
// registration it ran out for.
type ExpiredLease struct {
	Type, Name, AllocID string
	ModifyIndex         uint64
}

func (*ExpireRequest) CommandType() CommandType { return ExpireCommand }
func (*ExpireRequest) ID() string               { return "" }

func (r *ExpireRequest) Validate() error {
	if len(r.Leases) == 0 || len(r.Leases) > MaxExpireBatch {
		return fmt.Errorf("%w: expire %d instances: want 1 to %d", api.ErrInvalid, len(r.Leases), MaxExpireBatch)
	}
	for i, l := range r.Leases {
		if err := api.ValidateInstanceID(l.Type, l.Name, l.AllocID); err != nil {
			return fmt.Errorf("expire lease %d: %w", i, err)
		}
		if l.ModifyIndex == 0 {
			return fmt.Errorf("%w: expire lease %d (%s/%s/%s): no ModifyIndex", api.ErrInvalid, i, l.Type, l.Name, l.AllocID)
		}
	}
	return nil
}

// expire removes each instance of r that is still the leased
// registration its lease names, with one expired event each; the others
// are skipped (re-registered since, deregistered, or no longer leased).
func (s *State) expire(index uint64, r *ExpireRequest) (api.Result, []Event) {
	var events []Event
	for _, l := range r.Leases {
		list := s.recency(l.Type, l.Name)
		cur, seq, found := list.find(l.AllocID)
		if !found || cur.ModifyIndex != l.ModifyIndex || cur.TTL == 0 {
			continue
		}
		events = append(events, s.removeAt(index, list, seq, cur, api.EventExpired))
	}
	if len(events) == 0 {
		return api.ResultAbsent, nil
	}
	return ResultExpired, events
}

// WalkLeased calls fn with every instance that has a TTL, in (type, name)
// order, until fn returns false: what a new leader's lessor starts from.
// It walks the whole state (a leader does it once per term); fn must not
// keep or change p beyond reading it.
func (s *State) WalkLeased(fn func(p *api.PluginInfo) bool) {
	s.Walk(func(_, _ string, list []*api.PluginInfo) bool {
		for _, p := range list {
			if p.TTL != 0 && !fn(p) {
				return false
			}
		}
		return true
	})
}
