// Package fanout is a client agent's event fan-out: it serves any number
// of local subscribers (the agent's /v1/events) from ONE upstream event
// subscription per filter at the servers, so that a thousand local
// watchers are one server-side stream, not a thousand.
//
// What it owns: a Hub, one feed per canonical filter (types sorted and
// de-duplicated; none means all), each with the goroutine that follows
// its upstream and a ring of its last Config.Buffer events; and one
// goroutine per local subscriber. It does not own the transport: the
// caller's Upstream opens a server subscription (over transport.Pool's
// Stream, in the agent), and the hub closes it through its ctx.
//
// Promises (those of docs/events.md, for a consumer of the agent):
//
//  1. Ordered, no gap, no duplicate. Subscribe(from=N) delivers every
//     event with index > N once, in the servers' order. When the upstream
//     breaks (server died, connection cut, stalled for StallTimeout), the
//     feed reopens it with jittered backoff from its last complete index
//     (possibly at another server) and skips the events of a half-received
//     index that it already holds, as client.Watch does: local subscribers
//     see one sequence across reconnects.
//  2. A reset when needed. A subscriber from an index the ring covers is
//     served from it. One from an older index gets a passthrough: its own
//     upstream subscription from that index (the server sends a reset if
//     its journal no longer holds the events), until it reaches a whole
//     index the ring covers, where it moves onto the shared feed and drops
//     its own upstream. Stats counts passthroughs. An upstream reset goes
//     through the ring like any event; a subscriber from an index below the
//     ring may be served from the newest reset in the ring instead.
//  3. A slow subscriber slows only itself: each has its own goroutine and
//     cursor into the ring; the feed never waits for one. A subscriber whose
//     next event left the ring has its channel closed (after the events it
//     already held); it resumes as client.Watch does, from its last whole
//     index skipping what it had of the next, and gets the rest from the
//     ring, a passthrough, or a reset.
//  4. Heartbeats (at the subscriber's own period, when nothing else was
//     sent) carry the subscriber's own position: every event at or below
//     it was delivered before it, and it never moves backwards.
//  5. Channels close only when the subscriber's ctx ends, the hub closes,
//     or the subscriber fell off the ring (3).
//
// Caller's duties:
//
//  1. Provide an Upstream whose first event is a heartbeat carrying its
//     starting position, that heartbeats while idle more often than
//     StallTimeout, and that closes its channel when its ctx ends.
//  2. Call Close once done: it closes every subscriber's channel and every
//     upstream, and waits for every goroutine. Idempotent.
//  3. Only read delivered events: every subscriber of a feed gets the
//     same event and records (and its shared encodings, backend.Event, so the HTTP stream encodes
//     each event once), as a server's Subscribe does.
//
// Limits: the ring is in memory (Buffer events per filter). A feed is
// opened "from now"; an idle feed is closed Linger after its last
// subscriber left, and with it its ring. A passthrough moves onto the
// ring only at a heartbeat or at the start of a new index, so under a
// continuous stream of one index at a time it moves at the first such
// boundary the ring covers.
package fanout
