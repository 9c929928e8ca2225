package registry

import (
	"context"
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
	out    chan *Event
}

// run is owned by the Store that started it: it returns when ctx is done
// or the journal is closed, and closes out on the way.
func (s *subscription) run(ctx context.Context) {
	defer close(s.out)
	for {
		b := s.j.read(s.cursor, s.filter, readBatch)
		if b.closed {
			return
		}
		if b.reset != nil && !s.send(ctx, resetEvent(b.reset, s.filter)) {
			return
		}
		for i := range b.events {
			if !s.send(ctx, changeEvent(&b.events[i])) {
				return
			}
		}
		s.cursor = b.cursor
		if b.wait != nil {
			select {
			case <-b.wait:
			case <-ctx.Done():
				return
			case <-s.j.done:
				return
			}
		}
	}
}

func (s *subscription) send(ctx context.Context, ev *Event) bool {
	select {
	case s.out <- ev:
		return true
	case <-ctx.Done():
		return false
	case <-s.j.done:
		return false
	}
}
