package registry

import (
	"context"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

// readBatch bounds how many events a subscription copies out of the
// journal per read, so a reader holds the journal's lock only briefly.
const readBatch = 256

// subscription delivers journal events after its cursor to out, in order,
// from its own goroutine: a slow consumer blocks only this goroutine, never
// Apply and never another subscriber. When it falls off the journal it
// gets one reset and continues from the reset's index.
type subscription struct {
	j      *Journal
	filter Filter
	cursor uint64
	// waiter is its place in the journal's waiting index, filterKey its
	// filter's key for the shared resets; both set by start.
	waiter    *waiter
	filterKey string
	// One of out (a plain watch: each event a copy of its own) and
	// deliver (a node's front ends: the shared events) is set. A send on
	// the other, nil, never proceeds, so one select serves both.
	out       chan *api.Event
	deliver   chan backend.Event
	heartbeat time.Duration // zero: none
	lastSent  time.Time
	// caughtUp: a heartbeat was sent once the subscription had read to
	// the journal's end. The first one goes out then, however recent the
	// last send: a consumer resuming in the middle of an index (its
	// events taken, the index not yet known whole) replays that index,
	// and only a heartbeat says where the stream stands. Were it a whole
	// period away, a consumer whose stall timeout is shorter than the
	// period would, on a quiet stream whose last entry changes no
	// plugin, reconnect forever one index short.
	caughtUp bool
	// beat is the heartbeat timer, one for the subscription's life and
	// reset at each wait (a new timer per wait was one allocation per
	// applied batch per subscriber); nil until the first wait.
	beat *time.Timer
	// fromState: begin with a reset of the state as it is when the
	// subscription starts, wherever cursor is (Hub.WatchFromState).
	fromState bool
}

// run is owned by the Hub that started it: it returns when ctx is done
// or the journal is closed, and closes out on the way.
func (s *subscription) run(ctx context.Context) {
	defer s.close()
	if s.fromState {
		st := s.j.State()
		if !s.send(ctx, s.reset(st)) {
			return
		}
		s.cursor = st.Index()
	}
	for {
		b := s.j.read(s.waiter, s.cursor, s.filter, s.deliver != nil, readBatch)
		if b.closed {
			return
		}
		if b.reset != nil {
			if !s.send(ctx, s.reset(b.reset)) {
				return
			}
			s.j.resets.Add(1)
		}
		for i := range b.events {
			// A delivery stream gets the slot's shared event; a plain
			// watch its own copy, even when a delivery stream has read
			// the slot first.
			var ev backend.Event
			if s.deliver != nil {
				ev = *b.events[i].shared
			} else {
				ev = backend.Unshared(copiedEvent(&b.events[i].ev))
			}
			if !s.send(ctx, ev) {
				s.j.delivered.Add(uint64(i))
				return
			}
		}
		s.j.delivered.Add(uint64(len(b.events)))
		s.cursor = b.cursor
		// A heartbeat carries the cursor: every matching event at or
		// below it is already in the channel, so a heartbeat never runs
		// ahead of an event the consumer has yet to see.
		atEnd := b.wait != nil
		if s.heartbeat > 0 && (time.Since(s.lastSent) >= s.heartbeat || (atEnd && !s.caughtUp)) {
			if !s.send(ctx, backend.Unshared(&api.Event{Index: s.cursor, EventType: api.EventHeartbeat})) {
				return
			}
			s.caughtUp = s.caughtUp || atEnd
		}
		if b.wait != nil {
			if !s.wait(ctx, b.wait) {
				return
			}
		}
	}
}

// reset is the reset of st for this subscription: a delivery stream's
// shared with the others', a plain watch's its own copy.
func (s *subscription) reset(st *fsm.State) backend.Event {
	if s.deliver != nil {
		return s.j.deliveredReset(st, s.filter, s.filterKey)
	}
	return backend.Unshared(resetEvent(st, s.filter))
}

func (s *subscription) close() {
	s.j.leave(s.waiter)
	if s.beat != nil {
		s.beat.Stop()
	}
	if s.out != nil {
		close(s.out)
	} else {
		close(s.deliver)
	}
}

func (s *subscription) send(ctx context.Context, ev backend.Event) bool {
	select {
	case s.out <- ev.Event:
		s.lastSent = time.Now()
		return true
	case s.deliver <- ev:
		s.lastSent = time.Now()
		return true
	case <-ctx.Done():
		return false
	}
}

// wait blocks until the journal has more, a heartbeat is due, or the
// subscription ends (false).
func (s *subscription) wait(ctx context.Context, more <-chan struct{}) bool {
	var tick <-chan time.Time
	if s.heartbeat > 0 {
		d := s.heartbeat - time.Since(s.lastSent)
		// Since Go 1.23 a Reset timer delivers nothing left from before
		// it, fired or not, so one timer serves every wait.
		if s.beat == nil {
			s.beat = time.NewTimer(d)
		} else {
			s.beat.Reset(d)
		}
		tick = s.beat.C
	}
	select {
	case <-more:
	case <-tick:
	case <-ctx.Done():
		return false
	}
	return true
}
