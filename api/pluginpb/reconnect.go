package pluginpb

import "time"

// MaxReconnectBackoff is the longest a plugin waits between two attempts
// to reach its agent: package stub's backoff grows to it and no further.
// An agent that restarted counts on it: it gives its plugins at least this
// long, and a handshake, to come back before it removes the registrations
// of those that did not (pluginsock.Server.ReturnWindow).
const MaxReconnectBackoff = 5 * time.Second
