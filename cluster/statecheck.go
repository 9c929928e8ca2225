package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/plugreg/plugreg/fsm"
)

// The cross-replica state check. Every StateCheckInterval the leader
// appends a state check (fsm.StateCheckCommand). Each server, as it
// applies one, takes the digest of its registry as of that entry, off the
// apply path (the state is immutable once published), and keeps the last
// few. Each check carries its proposer's digest at an earlier check, and
// each server compares it with its own digest at that index. The servers'
// states at one index are equal byte for byte unless one is damaged, so a
// difference is an error line on the server that finds it and
// plugreg_state_check_mismatches_total; where the followers all find one
// and the leader none, the leader is the damaged one.
//
// What this finds that the entries' checksums do not: an entry changed
// on disk together with its checksum (a data dir pieced together from
// copies, a store that returned another block), memory corrupted, an
// apply that is not deterministic. What it does not: a difference that
// arose and was overwritten between two checks.

// DefaultStateCheckInterval is Config.StateCheckInterval's default, as
// often as Consul verifies its logs. A digest reads the whole registry:
// 0.12 s of one core at 200,000 instances (fsm's
// BenchmarkSnapshotFleet/digest, 590 ns an instance), 0.2 % of a core a
// minute on each server.
const DefaultStateCheckInterval = time.Minute

// stateCheckKeep is how many own digests a server keeps: a check compares
// against the proposer's newest, normally the one just before it.
const stateCheckKeep = 8

// stateChecker owns the digests of one server's states at state checks.
type stateChecker struct {
	self    string
	logger  hclog.Logger
	labels  []metrics.Label
	pending chan stateCheck // to run; the FSM's hook never waits on it

	mu      sync.Mutex
	digests []stateDigest // newest last
	stats   StateCheckStats
}

// stateCheck is a state check applied: the state as of its entry and the
// proposer's digest it carries.
type stateCheck struct {
	state *fsm.State
	claim *fsm.StateCheckRequest
}

type stateDigest struct {
	index  uint64
	digest [sha256.Size]byte
}

// StateCheckStats counts a server's state checks since it started.
type StateCheckStats struct {
	Digests    uint64 // own digests taken
	Matches    uint64 // another server's digest compared equal to this one's
	Mismatches uint64 // compared, and differed
	Unmatched  uint64 // another server's digest at an index this one has none for (restored past it, started since, or skipped)
	Skipped    uint64 // checks applied while the last digest was still being taken
	LastIndex  uint64 // the newest own digest's index
}

func newStateChecker(self string, logger hclog.Logger) *stateChecker {
	return &stateChecker{
		self: self, logger: logger,
		labels:  []metrics.Label{{Name: "node", Value: self}},
		pending: make(chan stateCheck, 1),
	}
}

// applied is the FSM's hook (fsm.OnStateCheck): it hands the check over
// without waiting, and drops it while the last one is still being taken
// (a digest reads the whole registry; a replay at start may apply many
// checks at once).
func (c *stateChecker) applied(s *fsm.State, claim *fsm.StateCheckRequest) {
	select {
	case c.pending <- stateCheck{s, claim}:
	default:
		c.mu.Lock()
		c.stats.Skipped++
		c.mu.Unlock()
		metrics.IncrCounterWithLabels([]string{"state_check", "skipped"}, 1, c.labels)
	}
}

// run takes the digests and compares the claims until stop is closed.
func (c *stateChecker) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case sc := <-c.pending:
			if sc.claim != nil {
				c.compare(sc.claim)
			}
			c.take(sc.state)
		}
	}
}

// compare checks another server's digest against this one's at its index.
func (c *stateChecker) compare(claim *fsm.StateCheckRequest) {
	if claim.Index == 0 || claim.Node == c.self {
		return
	}
	c.mu.Lock()
	own, ok := c.digestAt(claim.Index)
	match := ok && string(own[:]) == string(claim.Digest)
	switch {
	case !ok:
		c.stats.Unmatched++
	case match:
		c.stats.Matches++
	default:
		c.stats.Mismatches++
	}
	c.mu.Unlock()
	switch {
	case !ok:
		c.logger.Debug("state check: no digest of this server's at the index another server's digest is of", "index", claim.Index, "of", claim.Node)
	case match:
		metrics.IncrCounterWithLabels([]string{"state_check", "matches"}, 1, c.labels)
	default:
		metrics.IncrCounterWithLabels([]string{"state_check", "mismatches"}, 1, c.labels)
		c.logger.Error("this server's registry differs from another server's at the same index: one of them holds damaged data. Compare what the other servers report: the server that differs from the rest is the damaged one; replace its data dir (docs/operations.md, A server whose registry differs)",
			"index", claim.Index, "other", claim.Node, "digest", hex.EncodeToString(own[:]), "other_digest", hex.EncodeToString(claim.Digest))
	}
}

// take records the digest of s.
func (c *stateChecker) take(s *fsm.State) {
	start := time.Now()
	d, err := fsm.Digest(s)
	if err != nil {
		c.logger.Error("state check: digest not taken", "index", s.Index(), "error", err)
		return
	}
	metrics.MeasureSinceWithLabels([]string{"state_check", "digest"}, start, c.labels)
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.digests); n > 0 && c.digests[n-1].index >= s.Index() {
		// A replay at start, or a restore to an older state: what came
		// after is another history now.
		c.digests = c.digests[:0]
	}
	c.digests = append(c.digests, stateDigest{s.Index(), d})
	if len(c.digests) > stateCheckKeep {
		c.digests = c.digests[1:]
	}
	c.stats.Digests++
	c.stats.LastIndex = s.Index()
}

func (c *stateChecker) digestAt(index uint64) ([sha256.Size]byte, bool) {
	for _, d := range c.digests {
		if d.index == index {
			return d.digest, true
		}
	}
	return [sha256.Size]byte{}, false
}

// newest is this server's newest digest (index 0: none yet).
func (c *stateChecker) newest() (uint64, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.digests) == 0 {
		return 0, nil
	}
	d := c.digests[len(c.digests)-1]
	return d.index, append([]byte(nil), d.digest[:]...)
}

func (c *stateChecker) snapshot() StateCheckStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// StateChecks counts this server's cross-replica state checks.
func (s *Server) StateChecks() StateCheckStats { return s.checker.snapshot() }

// proposeStateChecks appends a state check every StateCheckInterval while
// this server leads (until stop is closed).
func (s *Server) proposeStateChecks(stop <-chan struct{}) {
	if s.cfg.StateCheckInterval < 0 {
		return
	}
	t := time.NewTicker(s.cfg.StateCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		index, digest := s.checker.newest()
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
		_, err := s.commit(ctx, &fsm.StateCheckRequest{Node: s.cfg.NodeID, Index: index, Digest: digest}, leaderOnly)
		cancel()
		if err != nil {
			s.logger.Warn("state check not appended", "error", err)
		}
	}
}
