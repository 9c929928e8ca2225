package api

import "errors"

// Cursor is a resume point in an event stream: every event up to Complete
// has been taken; of the events at Partial (> Complete), the first
// PartialCount have. Events of one index come in the same order from every
// node, so a stream resumed after Complete skips exactly those: call Skip
// when it opens and pass the count to every Next.
//
// The Go client, a client agent's fan-out and the plugin SDK all resume
// with it.
type Cursor struct {
	Complete     uint64
	Partial      uint64
	PartialCount int
}

// ErrResetBackwards is a reset below the position already taken: the
// stream's source is behind its consumer (a server that restarted from an
// older snapshot than an index the consumer took part of). Reconnect; a
// source that has caught up sends a reset at or past the position.
var ErrResetBackwards = errors.New("event stream reset below the position already taken")

// Resumed is the cursor for a stream that was asked to resume after
// c.Complete and says it starts at start: c itself, unless start is below
// c.Complete, which a server answers only when the cluster's committed
// history ends before c.Complete (it was restored from a backup, or
// rebuilt): then a cursor at start, so that the reset the stream opens
// with is taken as the new position rather than refused.
func (c Cursor) Resumed(start uint64) Cursor {
	if start < c.Complete {
		return Cursor{Complete: start}
	}
	return c
}

// Clean reports whether no index is half taken: Complete is then the
// position.
func (c Cursor) Clean() bool { return c.Partial <= c.Complete }

// Skip is the number of events of the half-taken index a stream resumed
// after Complete must skip.
func (c Cursor) Skip() int {
	if c.Clean() {
		return 0
	}
	return c.PartialCount
}

// Next returns the cursor after ev and whether ev is new (a change event
// not taken before, or a heartbeat or reset, which are always new). *skip
// counts the events of the partial index still to skip (from Skip). A
// reset below the position is ErrResetBackwards (see Resumed for a stream
// the cluster itself rewound).
func (c Cursor) Next(ev *Event, skip *int) (Cursor, bool, error) {
	switch ev.EventType {
	case EventHeartbeat:
		if ev.Index > c.Complete && ev.Index >= c.Partial {
			return Cursor{Complete: ev.Index}, true, nil
		}
		return c, true, nil
	case EventReset:
		if ev.Index < c.Complete || ev.Index < c.Partial {
			return c, false, ErrResetBackwards
		}
		*skip = 0
		return Cursor{Complete: ev.Index}, true, nil
	}
	if ev.Index <= c.Complete {
		return c, false, nil // never twice
	}
	if ev.Index == c.Partial && *skip > 0 {
		*skip--
		return c, false, nil
	}
	if ev.Index < c.Partial {
		return c, false, nil // cannot happen with ordered sources; drop
	}
	if ev.Index != c.Partial {
		if c.Partial > c.Complete {
			c.Complete = c.Partial // the earlier index is whole
		}
		c.Partial, c.PartialCount = ev.Index, 0
	}
	c.PartialCount++
	return c, true, nil
}
