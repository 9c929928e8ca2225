package fanout

import (
	"sort"
	"sync"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
)

// feed is one filter's shared upstream and its ring of the last events,
// read by every local subscriber with that filter. Its goroutine (run) is
// the only writer; subscribers hold mu only to copy events out.
type feed struct {
	h     *Hub
	key   string
	types []string

	// subs counts the subscribers attached (ring or passthrough); guarded
	// by Hub.mu, as are linger's Stop and Reset.
	subs   int
	linger *time.Timer // fires Linger after the last subscriber left

	ready chan struct{} // closed once started, or once the first attempt failed

	mu sync.Mutex // guards every field below; never held while sending
	// ring holds the last events (changes and resets, no heartbeats);
	// the event with sequence number s is at ring[s%len(ring)], for
	// first <= s < first+n.
	ring  []backend.Event
	first uint64
	n     int
	// floor: a reader at index c >= floor finds every event after c in
	// the ring (the evicted events are all at or below floor).
	floor uint64
	// pos is the last complete index: every event at or below it is in
	// the ring or below floor. Events of a later index may be in the ring
	// already (an index is complete once a later one or a heartbeat came).
	pos       uint64
	lastReset uint64 // sequence number of the newest reset; valid if hasReset
	hasReset  bool
	started   bool
	startErr  error
	notify    chan struct{} // closed and replaced when anything changed
}

func newFeed(h *Hub, key string, types []string) *feed {
	t := time.NewTimer(h.cfg.Linger)
	t.Stop()
	return &feed{
		h: h, key: key, types: types, linger: t,
		ready:  make(chan struct{}),
		ring:   make([]backend.Event, h.cfg.Buffer),
		notify: make(chan struct{}),
	}
}

// run is owned by the Hub: it follows the upstream from now until the
// hub closes or the feed retires (Linger after its last subscriber).
func (f *feed) run() {
	defer f.h.wg.Done()
	fl := &follower{
		h: f.h, types: f.types,
		tick:   f.linger.C,
		onTick: func() bool { return !f.h.retire(f) },
		onFail: func(err error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if !f.started && f.startErr == nil {
				f.startErr = err
				close(f.ready)
			}
		},
	}
	fl.run(f.h.ctx, f.take)
	f.linger.Stop()
}

// take records one upstream event.
func (f *feed) take(ev *api.Event, next api.Cursor) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started {
		f.started = true
		f.floor, f.pos = next.Complete, next.Complete
		if ev.EventType == api.EventReset {
			f.floor = 0 // the reset covers everything before it
		}
		if f.startErr == nil {
			close(f.ready)
		}
		f.startErr = nil
	}
	if ev.EventType != api.EventHeartbeat {
		f.appendLocked(ev)
	}
	f.pos = max(f.pos, next.Complete)
	close(f.notify)
	f.notify = make(chan struct{})
	return true
}

// appendLocked adds ev with the encodings every local subscriber will
// share.
func (f *feed) appendLocked(ev *api.Event) {
	if f.n == len(f.ring) {
		old := f.ring[f.first%uint64(len(f.ring))]
		f.floor = max(f.floor, old.Index)
		f.ring[f.first%uint64(len(f.ring))] = backend.Event{}
		if f.hasReset && f.lastReset == f.first {
			f.hasReset = false
		}
		f.first++
		f.n--
	}
	s := f.first + uint64(f.n)
	f.ring[s%uint64(len(f.ring))] = backend.Event{Event: ev, Shared: &backend.Encodings{}}
	f.n++
	if ev.EventType == api.EventReset {
		f.lastReset, f.hasReset = s, true
	}
}

func (f *feed) atLocked(s uint64) backend.Event { return f.ring[s%uint64(len(f.ring))] }

// seekLocked returns the sequence number from which a reader that has
// every event up to index c reads the rest: the first event after c when
// the ring holds them all, else the newest reset after c, when the ring
// holds one (allowReset). false: the ring cannot serve c.
func (f *feed) seekLocked(c uint64, allowReset bool) (uint64, bool) {
	if !f.started {
		return 0, false
	}
	if c >= f.floor {
		i := sort.Search(f.n, func(i int) bool { return f.atLocked(f.first+uint64(i)).Index > c })
		return f.first + uint64(i), true
	}
	if allowReset && f.hasReset && f.atLocked(f.lastReset).Index > c {
		return f.lastReset, true
	}
	return 0, false
}

// readResult is what one read hands a ring subscriber.
type readResult struct {
	events []backend.Event
	next   uint64 // the reader's next sequence number
	fell   bool   // the reader's next event left the ring
	// mark: every event at or below it is among the events read so far
	// (a heartbeat may carry it once they are delivered).
	mark uint64
	wait <-chan struct{}
}

// read copies out up to limit events from sequence number s.
func (f *feed) read(s uint64, limit int) readResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s < f.first {
		return readResult{fell: true}
	}
	end := f.first + uint64(f.n)
	var out []backend.Event
	for ; s < end && len(out) < limit; s++ {
		out = append(out, f.atLocked(s))
	}
	r := readResult{events: out, next: s, mark: f.pos, wait: f.notify}
	if s < end {
		r.mark = f.atLocked(s).Index - 1
	}
	return r
}
