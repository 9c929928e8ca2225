package fanout

import (
	"context"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
)

// readBatch bounds the events a subscriber copies out of the ring per read.
const readBatch = 256

// subscriber delivers one local subscription from its own goroutine: a
// slow consumer blocks only this goroutine.
type subscriber struct {
	h     *Hub
	f     *feed
	out   chan backend.Event
	start uint64 // the position the stream started at
	seq   uint64 // next ring sequence number (ring mode)
	// lastEv is the index of the last change or reset delivered, lastHB
	// of the last heartbeat; both only grow. A heartbeat is sent only at a
	// mark >= lastEv, so it never runs ahead of an undelivered event nor
	// behind a delivered one.
	lastEv, lastHB uint64
	heartbeat      time.Duration // zero: none
	lastSent       time.Time
	// beaten: a heartbeat was sent. The first one goes out as soon as the
	// subscriber has read to the ring's end at a safe mark, however
	// recent the last send (registry's subscription does the same, and
	// says why).
	beaten bool
}

// run is owned by the Hub. It serves from a passthrough first when the
// ring cannot, then from the ring; it closes out on the way out.
func (s *subscriber) run(ctx context.Context, passthrough bool) {
	defer s.h.wg.Done()
	defer s.h.leave(s.f)
	defer s.h.subscribers.Add(-1)
	defer close(s.out)
	if passthrough {
		s.h.activePassthroughs.Add(1)
		ok := s.passthrough(ctx)
		s.h.activePassthroughs.Add(-1)
		if !ok {
			return
		}
	}
	s.ring(ctx)
}

// ring delivers the feed's events from s.seq.
func (s *subscriber) ring(ctx context.Context) {
	var tick <-chan time.Time
	if s.heartbeat > 0 {
		t := time.NewTicker(s.heartbeat)
		defer t.Stop()
		tick = t.C
	}
	for {
		r := s.f.read(s.seq, readBatch)
		if r.fell {
			s.h.fellBehind.Add(1)
			s.h.logger.Debug("subscriber fell off the buffer; closing it", "types", s.f.types, "last", s.lastEv)
			return
		}
		for _, ev := range r.events {
			if ev.Index <= s.start {
				continue // a subscriber from an index ahead of the feed
			}
			if !s.send(ctx, ev) {
				return
			}
			s.lastEv = ev.Index
		}
		s.seq = r.next
		if len(r.events) > 0 {
			continue
		}
		if !s.maybeHeartbeat(ctx, r.mark) {
			return
		}
		select {
		case <-r.wait:
		case <-tick:
			if !s.maybeHeartbeat(ctx, r.mark) {
				return
			}
		case <-ctx.Done():
			return
		case <-s.h.done:
			return
		}
	}
}

// maybeHeartbeat sends a heartbeat at mark when one is due and mark is a
// safe position (false: the subscription ended).
func (s *subscriber) maybeHeartbeat(ctx context.Context, mark uint64) bool {
	if s.heartbeat <= 0 || (s.beaten && time.Since(s.lastSent) < s.heartbeat) || mark < s.lastEv {
		return true
	}
	at := max(mark, s.start, s.lastHB)
	if !s.send(ctx, backend.Unshared(&api.Event{Index: at, EventType: api.EventHeartbeat})) {
		return false
	}
	s.lastHB, s.beaten = at, true
	return true
}

func (s *subscriber) send(ctx context.Context, ev backend.Event) bool {
	select {
	case s.out <- ev:
		s.lastSent = time.Now()
		return true
	case <-ctx.Done():
		return false
	case <-s.h.done:
		return false
	}
}

// passthrough serves the subscriber from its own upstream, from s.start,
// until it reaches a whole index the ring covers; it then sets s.seq and
// returns true (false: the subscription ended).
func (s *subscriber) passthrough(ctx context.Context) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.h.ctx, cancel)
	defer stop()
	var tick <-chan time.Time
	if s.heartbeat > 0 {
		t := time.NewTicker(s.heartbeat)
		defer t.Stop()
		tick = t.C
	}
	fl := &follower{h: s.h, types: s.f.types, cur: api.Cursor{Complete: s.start}, known: true, tick: tick}
	fl.onTick = func() bool {
		if !fl.cur.Clean() {
			return true
		}
		return s.maybeHeartbeat(ctx, fl.cur.Complete)
	}
	moved := false
	// switchTo moves onto the ring at whole index c if the ring covers it.
	switchTo := func(c uint64) bool {
		s.f.mu.Lock()
		seq, ok := s.f.seekLocked(c, false)
		s.f.mu.Unlock()
		if ok {
			s.seq, s.start, moved = seq, max(s.start, c), true
		}
		return ok
	}
	fl.run(ctx, func(ev *api.Event, next api.Cursor) bool {
		switch {
		case ev.EventType == api.EventHeartbeat:
			return !(next.Clean() && switchTo(next.Complete))
		case ev.EventType != api.EventReset && ev.Index != fl.cur.Partial:
			// ev starts a new index: every event before it was delivered.
			if switchTo(max(fl.cur.Complete, fl.cur.Partial)) {
				return false // ev is read again from the ring
			}
		}
		if !s.send(ctx, backend.Unshared(ev)) { // this subscriber's own upstream: nothing shared
			return false
		}
		s.lastEv = ev.Index
		return true
	})
	if moved {
		s.h.logger.Debug("passthrough caught up; moved onto the shared upstream", "types", s.f.types, "at", s.start)
	}
	return moved
}
