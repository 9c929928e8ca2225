package cluster

import (
	"sync"
	"time"

	"github.com/plugreg/plugreg/gossip"
)

// proofRetry is how long a member's refused claim to be a server is
// believed before the leader asks its address again; maxProofs bounds what
// is remembered (a hostile member can make up claims without end).
const (
	proofRetry = 30 * time.Second
	maxProofs  = 1024
)

// proofs remembers gossip members' refused claims to be servers (see
// Server.proveServer), so that the leader's reconcile, every two seconds,
// neither waits on a hostile member's address on each pass nor logs it
// each time: one warning per claim, one new attempt per proofRetry.
type proofs struct {
	mu      sync.Mutex
	refusal map[proofKey]time.Time
}

type proofKey struct{ id, addr string }

func keyOf(m gossip.Meta) proofKey { return proofKey{m.ID, m.RaftAddr} }

// due reports whether m's claim should be checked now.
func (p *proofs) due(m gossip.Meta) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.refusal[keyOf(m)]
	return !ok || time.Since(at) >= proofRetry
}

// refused records a refusal and reports whether it is the claim's first
// (the one to log).
func (p *proofs) refused(m gossip.Meta) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refusal == nil || len(p.refusal) >= maxProofs {
		p.refusal = map[proofKey]time.Time{}
	}
	_, seen := p.refusal[keyOf(m)]
	p.refusal[keyOf(m)] = time.Now()
	return !seen
}

// proved forgets a claim that now holds.
func (p *proofs) proved(m gossip.Meta) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.refusal, keyOf(m))
}
