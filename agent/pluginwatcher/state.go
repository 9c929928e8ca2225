package pluginwatcher

import (
	"maps"
	"slices"
	"time"

	"github.com/plugreg/plugreg/api"
)

// nameKey is a plugin name: the state machine of one (Type, Name) runs one
// operation at a time.
type nameKey struct{ typ, name string }

// socketState is one entry of the desired state of world: a socket seen
// in Dir, with what it last answered.
type socketState struct {
	path string
	// stamp and seq identify the current incarnation of the socket: its
	// creation time (mtime) and the discovery counter. Newer (stamp, seq)
	// wins among sockets of one name.
	stamp time.Time
	seq   uint64

	// ok: the last GetInfo, of incarnation gotSeq, answered and validated
	// as key/info. A socket re-created on the same path keeps its old
	// answer (and registration) until its new incarnation has answered.
	ok     bool
	gotSeq uint64
	key    nameKey
	info   *api.PluginInfo

	busy     bool      // a probe of this socket is running
	failures int       // consecutive failed steps, for the backoff
	slow     int       // consecutive timed-out probes while registered (see SlowProbes)
	retryAt  time.Time // no probe before this, while !ok or unanswered
	probeAt  time.Time // next periodic probe, while ok

	// probeFailed: the last probe of this incarnation failed (no answer,
	// an error, or refused). A socket whose Register failed has answered:
	// it is still the plugin, and what it may hold is kept (mayStillBe).
	probeFailed bool

	// answeredAt is when a probe last answered; suspect is the health
	// its registration should carry while its probes time out (slow >
	// 0), nil while it answers.
	answeredAt time.Time
	suspect    *api.InstanceHealth
}

// newer reports whether s is a newer socket than o.
func (s *socketState) newer(o *socketState) bool {
	if !s.stamp.Equal(o.stamp) {
		return s.stamp.After(o.stamp)
	}
	return s.seq > o.seq
}

// answered reports whether the current incarnation's answer is in.
func (s *socketState) answered() bool { return s.ok && s.gotSeq == s.seq }

// registration is one entry of the actual state of world: what the
// Registrar holds from this watcher for a name.
type registration struct {
	path string
	seq  uint64 // incarnation registered and notified
	info *api.PluginInfo
	// told: the plugin acknowledged NotifyRegistrationStatus(true). When
	// it did not (a timeout on a loaded host), the next successful probe
	// tells it again: the DRA helper, for one, waits for it.
	told bool
}

// nameState is the state machine of one plugin name.
type nameState struct {
	busy bool          // an operation (register or deregister) is running
	reg  *registration // nil: nothing registered for the name
	// stale are registrations of the name to remove: a replaced instance,
	// or one whose Deregister failed; they are retried with backoff.
	stale []*api.PluginInfo
	// unsure are the instances whose last Register failed, by AllocID:
	// the Registrar may hold them all the same (the agent's Host keeps
	// what it was asked, for anti-entropy to write once the cluster is
	// back, and a write that timed out may have applied). One whose
	// socket goes away before a Register of it succeeds becomes stale.
	unsure   map[string]*registration
	failures int
	retryAt  time.Time
	// healthFailures and healthRetryAt: the backoff of health writes.
	healthFailures int
	healthRetryAt  time.Time
}

// registered notes that info is registered: it is no longer unsure, and a
// pending Deregister of the same instance (an earlier incarnation of the
// same socket, whose removal failed while the cluster was unreachable) is
// dropped, or its retry would remove the instance just registered. It
// reports whether one was dropped.
func (n *nameState) registered(info *api.PluginInfo) (droppedDeregister bool) {
	delete(n.unsure, info.AllocID)
	before := len(n.stale)
	n.stale = slices.DeleteFunc(n.stale, func(p *api.PluginInfo) bool { return p.AllocID == info.AllocID })
	return len(n.stale) < before
}

// failedToRegister notes an instance whose Register failed.
func (n *nameState) failedToRegister(r *registration) {
	if n.unsure == nil {
		n.unsure = make(map[string]*registration)
	}
	n.unsure[r.info.AllocID] = r
}

// idle reports whether the name holds nothing any more: the loop forgets it.
func (n *nameState) idle() bool {
	return !n.busy && n.reg == nil && len(n.stale) == 0 && len(n.unsure) == 0
}

func infoEqual(a, b *api.PluginInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	ca, cb := a.ConnectionInfo, b.ConnectionInfo
	return a.Type == b.Type && a.Name == b.Name && a.AllocID == b.AllocID &&
		a.Version == b.Version && a.NodeID == b.NodeID &&
		(ca == nil) == (cb == nil) && (ca == nil || *ca == *cb) &&
		maps.Equal(a.Options, b.Options)
}
