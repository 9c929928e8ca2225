package cluster

import (
	"errors"
	"fmt"
	"golang.org/x/time/rate"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
)

// ReapBrakes bound the leader's reaping (issue 27, item 3). A partition
// of a rack, or a gossip storm on a starved machine, makes many nodes
// look dead at once; reaping them all deregisters every plugin of each,
// only for their agents to register them all again on heal (the
// lease-expiry storms of etcd issue 9360). Kubernetes' node lifecycle
// controller brakes its evictions the same two ways: a rate, and a stop
// when a zone goes dark. A field's zero value means its default
// (DefaultReapBrakes).
type ReapBrakes struct {
	// Rate is the most nodes the leader reaps a second, after a first
	// Burst at once: even a real mass failure is reaped gradually, and
	// the guard sees a failure that grows before it has all been reaped
	// (Kubernetes' --node-eviction-rate). Zero: scaled to the fleet,
	// ReapRateFraction of the client agents a second (those the guard
	// counts), never below 1: a rate fixed for a hundred hosts takes 17
	// minutes over a thousand dead ones. Negative: no limit.
	Rate float64
	// Burst is how many nodes may be reaped at once (zero: 3); with a
	// scaled Rate, at least a second's worth.
	Burst int
	// PauseAbove: while more than this fraction of the client agents
	// is failed (see census for which count), the leader reaps no
	// failed node, until enough come back or an operator resumes
	// reaping (Server.ResumeReaping; Kubernetes'
	// --unhealthy-zone-threshold). Zero: 0.55; 1: never pause.
	PauseAbove float64
	// PauseMinFailed: the guard holds only while at least this many
	// client agents are failed, so that with few agents a death is still
	// reaped (Kubernetes needs more than 2 nodes not ready). Zero: 3.
	PauseMinFailed int
}

// DefaultReapBrakes are the brakes of DefaultConfig: at most 3 nodes
// reaped at once, and after that 1% of the client agents a second, at
// least one; no failed node reaped while at least 3 client agents, and
// more than 55% of them, are failed.
func DefaultReapBrakes() ReapBrakes {
	return ReapBrakes{Rate: 0, Burst: 3, PauseAbove: 0.55, PauseMinFailed: 3}
}

// ReapRateFraction is the share of the client agents reaped a second when
// ReapBrakes.Rate is zero: a thousand dead hosts of ten thousand are
// reaped in ten seconds, not seventeen minutes, and a fleet's mass failure
// still reaches the guard (PauseAbove) long before the rate could reap
// it, since every node waits NodeReapAfter first.
const ReapRateFraction = 0.01

// rateFor is the reap rate with this many client agents counted (census).
func (b ReapBrakes) rateFor(clients int) float64 {
	if b.Rate != 0 {
		return b.Rate
	}
	return max(1, ReapRateFraction*float64(clients))
}

// burstFor is the bucket's size with this many client agents counted: a
// scaled rate brings a second's worth at once, so that each pass of the
// leader loop (a walk of every member) reaps a second's nodes rather than
// one every 1/rate seconds; a rate the operator set keeps Burst.
func (b ReapBrakes) burstFor(clients int) int {
	if b.Rate != 0 {
		return b.Burst
	}
	return max(b.Burst, int(math.Ceil(b.rateFor(clients))))
}

// Validate checks the brakes as Config.Validate does: for a caller that
// refuses them before it starts anything.
func (b ReapBrakes) Validate() error {
	var errs []error
	if math.IsNaN(b.Rate) || math.IsInf(b.Rate, 0) {
		errs = append(errs, fmt.Errorf("node reap rate %v: want nodes a second (negative: no limit)", b.Rate))
	}
	if b.Burst < 0 {
		errs = append(errs, fmt.Errorf("node reap burst %d: want 1 or more (0: %d)", b.Burst, DefaultReapBrakes().Burst))
	}
	if !(b.PauseAbove >= 0 && b.PauseAbove <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("node reap pause above %v: want a fraction from 0 to 1 (1: never pause)", b.PauseAbove))
	}
	if b.PauseMinFailed < 0 {
		errs = append(errs, fmt.Errorf("node reap pause min failed %d: want 1 or more (0: %d)", b.PauseMinFailed, DefaultReapBrakes().PauseMinFailed))
	}
	return errors.Join(errs...)
}

func (b ReapBrakes) withDefaults() ReapBrakes {
	d := DefaultReapBrakes()
	if b.Burst == 0 {
		b.Burst = d.Burst
	}
	if b.PauseAbove == 0 {
		b.PauseAbove = d.PauseAbove
	}
	if b.PauseMinFailed == 0 {
		b.PauseMinFailed = d.PauseMinFailed
	}
	return b
}

// holds reports whether failed client agents of clients are too many to
// reap failures: at least PauseMinFailed, and more than PauseAbove of
// them (so PauseAbove 1 never holds).
func (b ReapBrakes) holds(failed, clients int) bool {
	return failed >= b.PauseMinFailed && float64(failed) > b.PauseAbove*float64(clients)
}

// census counts the client agents that bear on the guard: the alive ones,
// and the failed ones that still have plugins registered. A failed agent
// without plugins (reaped already, or it had none) counts for nothing:
// the gossip pool keeps it a while (Config.GossipForgetAfter), and hosts
// gone for good would otherwise hold the guard; so does one that left,
// which it did on purpose. Servers never count: the guard is about the
// hosts, and under a leader most servers are alive by construction, which
// would only dilute the fraction.
func census(members []gossip.Member, hasPlugins func(node string) bool) (failed, clients int) {
	for _, m := range members {
		if m.Meta.IsServer() {
			continue
		}
		switch {
		case m.Status == gossip.StatusAlive:
			clients++
		case m.Status == gossip.StatusFailed && hasPlugins(m.Name):
			failed++
			clients++
		}
	}
	return failed, clients
}

// tokenBucket spaces reaps: it holds up to burst tokens, one more every
// 1/rate seconds, and starts full; a rate of zero or less never runs out.
// It is x/time/rate's limiter, asked at the leader loop's own clock.
type tokenBucket struct{ lim *rate.Limiter }

func newTokenBucket(r float64, burst int) tokenBucket {
	limit := rate.Limit(r)
	if r <= 0 {
		limit = rate.Inf
	}
	return tokenBucket{lim: rate.NewLimiter(limit, burst)}
}

// resize changes the rate and the burst from now on (the tokens so far
// stay).
func (b *tokenBucket) resize(r float64, burst int, now time.Time) {
	limit := rate.Limit(r)
	if r <= 0 {
		limit = rate.Inf
	}
	if b.lim.Limit() != limit {
		b.lim.SetLimitAt(now, limit)
	}
	if b.lim.Burst() != burst {
		b.lim.SetBurstAt(now, burst)
	}
}

// take takes a token at now and returns 0, or takes none and returns how
// long until there is one.
func (b *tokenBucket) take(now time.Time) time.Duration {
	res := b.lim.ReserveN(now, 1)
	if wait := res.DelayFrom(now); wait > 0 {
		res.CancelAt(now)
		// A millisecond more: a wake-up a hair early would find the
		// token not quite there and wake again at once.
		return wait + time.Millisecond
	}
	return 0
}

// reapBrakes are the brakes of one leadership: a new leader starts with a
// full bucket and the guard released, and judges from its own view of
// gossip.
type reapBrakes struct {
	cfg    ReapBrakes
	logger hclog.Logger
	bucket tokenBucket   // the leader loop's alone
	kick   chan struct{} // capacity 1: an operator resumed reaping; reconcile now
	// releasedAt is when the guard last released by itself (the leader
	// loop's alone): the nodes still failed then are reaped no sooner
	// than NodeReapAfter later (dueForReaping). A healing partition
	// brings its agents back over seconds, and the guard releases at the
	// first few; the rest deserve the grace of a fresh failure, not a
	// reap for being late.
	releasedAt time.Time

	mu sync.Mutex // guards the rest: the leader loop writes, operators and metrics read
	// engaged: more than PauseAbove of the client agents are failed.
	engaged bool
	// resumed: an operator let reaping go on while engaged; it lasts
	// until the guard releases, so the next mass failure holds again.
	resumed         bool
	failed, clients int // the last census
}

func newReapBrakes(cfg ReapBrakes, logger hclog.Logger) *reapBrakes {
	return &reapBrakes{cfg: cfg, logger: logger, bucket: newTokenBucket(cfg.rateFor(0), cfg.burstFor(0)), kick: make(chan struct{}, 1)}
}

// observe takes the census of this reconcile, at now, sizes the reap
// rate and burst to the fleet, and reports whether the guard holds the
// reaping of failed nodes; it logs once when the guard engages and once
// when it releases. The leader loop alone calls it.
func (b *reapBrakes) observe(failed, clients int, now time.Time) (hold bool) {
	b.bucket.resize(b.cfg.rateFor(clients), b.cfg.burstFor(clients), now)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed, b.clients = failed, clients
	switch over := b.cfg.holds(failed, clients); {
	case over && !b.engaged:
		b.engaged = true
		b.logger.Warn("reaping paused: more client agents are failed at once than -node-reap-pause-above allows; a partition or a gossip storm is likelier than that many deaths, so no failed node is reaped until enough come back or an operator resumes reaping (plugreg operator reap resume)",
			"failed", failed, "clients", clients, "pause_above", b.cfg.PauseAbove)
	case !over && b.engaged:
		if !b.resumed {
			// Agents came back. After an operator's resume, the
			// reaps did it: no grace for the rest, as the operator
			// asked.
			b.releasedAt = now
		}
		b.engaged, b.resumed = false, false
		b.logger.Info("reaping no longer paused: the failed client agents are back within -node-reap-pause-above",
			"failed", failed, "clients", clients, "pause_above", b.cfg.PauseAbove)
	}
	return b.engaged && !b.resumed
}

// resume lets reaping go on, at the rate, while the guard is engaged,
// until it releases: an operator's call once the failures are known to be
// real. With the guard released it changes nothing.
func (b *reapBrakes) resume() api.ReapStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.engaged && !b.resumed {
		b.resumed = true
		b.logger.Warn("reaping resumed by an operator while the guard would hold it; it holds again once the failures fall within -node-reap-pause-above and then rise above it",
			"failed", b.failed, "clients", b.clients, "pause_above", b.cfg.PauseAbove)
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return b.statusLocked()
}

func (b *reapBrakes) status() api.ReapStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.statusLocked()
}

func (b *reapBrakes) statusLocked() api.ReapStatus {
	return api.ReapStatus{Paused: b.engaged && !b.resumed, Resumed: b.resumed, FailedClients: b.failed, Clients: b.clients,
		PauseAbove: b.cfg.PauseAbove, PauseMinFailed: b.cfg.PauseMinFailed}
}

// ResumeReaping lets the leader reap failed nodes, at the reap rate, while
// the guard would hold them (ReapBrakes.PauseAbove), until it releases; it
// returns the guard's state. Only the leader has a guard: another node
// refuses (CodeNotLeader).
func (s *Server) ResumeReaping() (api.ReapStatus, error) {
	b := s.lead.brakes.Load()
	if b == nil {
		return api.ReapStatus{}, notApplied(api.CodeNotLeader, errors.New("resume reaping: this server does not lead; ask the leader"))
	}
	return b.resume(), nil
}

// ReapStatus is the leader's guard on reaping; false on another node.
func (s *Server) ReapStatus() (api.ReapStatus, bool) {
	b := s.lead.brakes.Load()
	if b == nil {
		return api.ReapStatus{}, false
	}
	return b.status(), true
}
