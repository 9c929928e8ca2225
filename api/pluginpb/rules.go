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
