package pluginpb

import "time"

// MaxReconnectBackoff is the longest a plugin waits between two attempts
// to reach its agent: package stub's backoff grows to it and no further.
// An agent that restarted counts on it: it gives its plugins at least this
// long, and a handshake, to come back before it removes the registrations
// of those that did not (pluginsock.Server.ReturnWindow).
const MaxReconnectBackoff = 5 * time.Second

// ValidIdx reports whether idx is a plugin idx: two digits, "00" to "99"
// (NRI's convention). The SDK and the agent both check it.
func ValidIdx(idx string) bool {
	return len(idx) == 2 && '0' <= idx[0] && idx[0] <= '9' && '0' <= idx[1] && idx[1] <= '9'
}

// ChangeKinds are the event kinds a session's mask selects; the others
// (heartbeats, resets, and kinds added after the reader was built) always
// pass: they move the stream's position.
const ChangeKinds = uint32(EventKind_EVENT_KIND_REGISTERED | EventKind_EVENT_KIND_UPDATED |
	EventKind_EVENT_KIND_DEREGISTERED | EventKind_EVENT_KIND_EXPIRED | EventKind_EVENT_KIND_HEALTH)

// MaskedKind is how an event of kind k reaches a session whose mask is
// mask: as k, as another kind, or not at all (false). An expiry reaches a
// mask without EXPIRED but with DEREGISTERED as a deregistration: the
// instance is gone all the same, and a plugin built before leases asks
// for no other kind (and would drop one it does not know). The agent
// applies it to what it sends, the SDK to what it hands its handlers. A
// health change reaches a mask without HEALTH but with UPDATED as an
// update, for the same reason.
func MaskedKind(mask uint32, k EventKind) (EventKind, bool) {
	switch {
	case uint32(k)&ChangeKinds == 0, mask&uint32(k) != 0:
		return k, true
	case k == EventKind_EVENT_KIND_EXPIRED && mask&uint32(EventKind_EVENT_KIND_DEREGISTERED) != 0:
		return EventKind_EVENT_KIND_DEREGISTERED, true
	case k == EventKind_EVENT_KIND_HEALTH && mask&uint32(EventKind_EVENT_KIND_UPDATED) != 0:
		return EventKind_EVENT_KIND_UPDATED, true
	}
	return k, false
}
