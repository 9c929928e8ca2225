package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/registry"
)

// A server's side of leases (the lessor itself is lessor.go): the leader
// runs a lessor for its term, renewals reach it from any server, and its
// expiry loop proposes what ran out.

const (
	// rpcRenew: api.RenewRequest -> api.RenewResult; leader only; served
	// from RPCVersion rpcVersionLeases on.
	rpcRenew = "Renew"
	// rpcVersionLeases is the RPCVersion (gossip.Meta) of servers that
	// serve Renew and apply ExpireCommand. The leader proposes no expiry
	// while a server of the configuration does not say so: an older one
	// would panic on the entry.
	rpcVersionLeases = 2
	// leaseTick is how often the leader looks for leases that ran out: an
	// instance outlives its deadline by up to a tick (and the entry's
	// commit).
	leaseTick = 100 * time.Millisecond
	// DefaultLeaseExpiryRate is Config.LeaseExpiryRate's default: etcd's
	// leaseRevokeRate.
	DefaultLeaseExpiryRate = 1000
)

// LeaseStats are a server's lease figures: the leases its lessor holds
// (zero on a follower), and the expiry entries it proposed and the
// instances they removed, since it started.
type LeaseStats struct {
	Leases        int
	ExpiryEntries uint64
	Expired       uint64
}

// LeaseStats returns the server's lease figures.
func (s *Server) LeaseStats() LeaseStats {
	st := LeaseStats{ExpiryEntries: s.lead.expiryEntries.Load(), Expired: s.lead.expired.Load()}
	if l := s.lead.lessor.Load(); l != nil {
		st.Leases = l.len()
	}
	return st
}

// startLeases runs the lessor of this leader's term: every lease of the
// applied state starts afresh (the grace of a new leader), the lessor
// follows the leader's events from that state on, and a loop expires what
// runs out. Called by leaderLoop once its barrier has applied; the
// returned func ends the term's lessor and waits for its goroutines.
func (s *Server) startLeases(stop <-chan struct{}) (end func()) {
	st := s.fsm.State()
	l := newLessor(time.Now, s.cfg.LeaseExpiryRate, leaseTick)
	l.grantAll(st)
	ctx, cancel := context.WithCancel(s.ctx)
	events, err := s.hub.Deliver(ctx, registry.Filter{}, st.Index(), 0)
	if err != nil { // the hub is shut down: so is the server
		cancel()
		return func() {}
	}
	s.lead.lessor.Store(l)
	s.logger.Debug("leases taken over", "leases", l.len(), "index", st.Index())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev := range events { // closed once ctx ends
			l.observe(ev.Event)
		}
	}()
	go func() {
		defer wg.Done()
		s.expireLoop(ctx, stop, l)
	}()
	return func() {
		s.lead.lessor.CompareAndSwap(l, nil)
		cancel()
		wg.Wait()
	}
}

// expireLoop proposes, every leaseTick, one ExpireCommand with the leases
// that ran out (as many as the lessor's budget allows), until stop.
func (s *Server) expireLoop(ctx context.Context, stop <-chan struct{}, l *lessor) {
	t := time.NewTicker(leaseTick)
	defer t.Stop()
	held := false
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !l.anyDue() {
			continue
		}
		if old := s.serverBelow(rpcVersionLeases); old != "" {
			if !held {
				s.logger.Warn("leases that run out are not expired while a server of the configuration cannot apply an expiry; upgrade it", "server", old)
				held = true
			}
			continue
		}
		held = false
		batch := l.due()
		if len(batch) == 0 {
			continue
		}
		if h := s.lead.expireHook.Load(); h != nil {
			(*h)(batch)
		}
		err := s.proposeExpiry(ctx, batch)
		if err != nil {
			s.logger.Warn("expiring leases failed; they are tried again", "leases", len(batch), "error", err)
		}
		l.settled(batch, err)
	}
}

// proposeExpiry applies one ExpireCommand through this leader's raft,
// never forwarded (leaderOnly).
func (s *Server) proposeExpiry(ctx context.Context, batch []fsm.ExpiredLease) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
	defer cancel()
	res, err := s.commit(ctx, &fsm.ExpireRequest{Leases: batch}, leaderOnly)
	if err != nil {
		return fmt.Errorf("expire %d leases: %w", len(batch), err)
	}
	s.lead.expiryEntries.Add(1)
	s.lead.expired.Add(uint64(res.Removed))
	s.logger.Debug("leases expired", "index", res.Index, "expired", res.Removed, "batch", len(batch))
	return nil
}

// Renew renews the lease of one instance: on the leader, or forwarded to
// it. A renewal is never in the log; it is answered once the leader moved
// the lease's deadline. Errors: api.ErrNotFound (no such lease),
// api.ErrConflict (IfNodeID does not hold), or an *api.Error whose
// outcome says whether to try again (a renewal is safe to repeat).
func (s *Server) Renew(ctx context.Context, req api.RenewRequest) (api.RenewResult, error) {
	if err := req.Validate(); err != nil {
		return api.RenewResult{}, err
	}
	return leaderCall(ctx, s, func() (api.RenewResult, error) { return s.renewLocal(req) }, rpcRenew, &req)
}

// renewLocal renews on this server, which must lead and have taken over
// the leases of its term, and still lead once the renewal is made: a
// round of heartbeats (VerifyLeader) confirms it. Without it a deposed
// leader that has not yet heard of its successor (paused, or cut off
// within its lease) acknowledges a renewal the new leader never sees;
// the new leader counts the lease from its own start and may expire it
// before the deadline the holder was told. The fault suite caught it: a
// leader paused for 2.3 s answered a renewal queued during the pause as
// it resumed, and the new leader expired the lease 0.6 s before the
// acknowledged deadline. Once the heartbeats are answered no later
// leader can have begun before the renewal, and a leader that begins
// after it grants every lease a full TTL from then.
func (s *Server) renewLocal(req api.RenewRequest) (api.RenewResult, error) {
	if !s.IsLeader() {
		return api.RenewResult{}, notApplied(api.CodeNotLeader, raft.ErrNotLeader)
	}
	l := s.lead.lessor.Load()
	if l == nil {
		return api.RenewResult{}, notApplied(api.CodeNotReady, errors.New("the new leader has not taken over the leases yet"))
	}
	res, err := l.renew(req, s.fsm.State())
	if err != nil {
		return res, err
	}
	// Its lessor's deadline moved either way; a leader that fails this
	// is deposed, and its lessor goes with its term.
	if err := s.raft.VerifyLeader().Error(); err != nil {
		return api.RenewResult{}, notApplied(api.CodeNotLeader, fmt.Errorf("renew %s/%s/%s: leadership not confirmed: %w", req.Type, req.Name, req.AllocID, err))
	}
	return res, nil
}

// renewAfterRegister renews the lease of a registration that changed
// nothing: it left no event for the leader's lessor to start the lease
// again from, and a re-registration resets the deadline. Best effort: a
// failure is the holder's next renewal's to make up.
func (s *Server) renewAfterRegister(ctx context.Context, p *api.PluginInfo) {
	if _, err := s.Renew(ctx, api.RenewRequest{Type: p.Type, Name: p.Name, AllocID: p.AllocID}); err != nil {
		s.logger.Debug("renewing the lease of an unchanged registration failed", "plugin", p.Type+"/"+p.Name+"/"+p.AllocID, "error", err)
	}
}
