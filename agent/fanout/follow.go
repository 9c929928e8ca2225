package fanout

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/plugreg/plugreg/api"
)

// cursor is a resume point, as in client/watch.go: every event up to
// complete has been taken; of the events at partial (> complete), the
// first partialCount have. Events of one index come in the same order
// from every server, so a resume from complete skips exactly those.
type cursor struct {
	complete     uint64
	partial      uint64
	partialCount int
}

// clean reports whether no index is half taken: complete is then the
// position.
func (c cursor) clean() bool { return c.partial <= c.complete }

// errBackwards: a reset behind what was already taken.
var errBackwards = errors.New("fanout: upstream reset below the position already taken")

// next returns the cursor after ev and whether ev is new. *skip counts
// the events of the partial index still to skip after a resume.
func (c cursor) next(ev *api.Event, skip *int) (cursor, bool, error) {
	switch ev.EventType {
	case api.EventHeartbeat:
		if ev.Index > c.complete && ev.Index >= c.partial {
			return cursor{complete: ev.Index}, true, nil
		}
		return c, true, nil
	case api.EventReset:
		if ev.Index < c.complete || ev.Index < c.partial {
			return c, false, errBackwards
		}
		*skip = 0
		return cursor{complete: ev.Index}, true, nil
	}
	if ev.Index <= c.complete {
		return c, false, nil // never twice
	}
	if ev.Index == c.partial && *skip > 0 {
		*skip--
		return c, false, nil
	}
	if ev.Index < c.partial {
		return c, false, nil // cannot happen with ordered upstreams; drop
	}
	if ev.Index != c.partial {
		if c.partial > c.complete {
			c.complete = c.partial // the earlier index is whole
		}
		c.partial, c.partialCount = ev.Index, 0
	}
	c.partialCount++
	return c, true, nil
}

// follower reads one filter's upstream from its cursor and reopens it
// when it breaks, so that handle sees one sequence with no gap and no
// duplicate across reconnects. It runs in its owner's goroutine.
type follower struct {
	h     *Hub
	types []string
	cur   cursor
	// known: cur is a position. False only for a feed opened "from now",
	// until the upstream's first heartbeat.
	known bool
	// tick, if set, calls onTick (from run's goroutine); false stops run.
	tick   <-chan time.Time
	onTick func() bool
	// onFail, if set, is told when an attempt ended before the position
	// was known.
	onFail func(error)
}

// handler receives each new event (heartbeats included) and the cursor
// after it; the follower moves its cursor only when handler returns true.
// false stops the follower.
type handler func(ev *api.Event, next cursor) bool

// run follows until ctx ends, handle or onTick returns false.
func (fl *follower) run(ctx context.Context, handle handler) {
	attempt := 0
	for {
		progressed, err := fl.once(ctx, handle)
		if errors.Is(err, errStop) || ctx.Err() != nil {
			return
		}
		if !fl.known && fl.onFail != nil {
			fl.onFail(err)
		}
		fl.h.logger.Debug("upstream ended; reopening", "types", fl.types, "from", fl.cur.complete, "error", err)
		if progressed {
			attempt = 0
		}
		attempt++
		if !fl.sleep(ctx, fl.h.backoff(attempt)) {
			return
		}
	}
}

var errStop = errors.New("fanout: follower stopped")

func (fl *follower) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-fl.tick:
			if !fl.onTick() {
				return false
			}
		case <-ctx.Done():
			return false
		}
	}
}

// once opens the upstream once and reads it until it breaks (an error
// saying why), stalls, or run must stop (errStop).
func (fl *follower) once(ctx context.Context, handle handler) (progressed bool, err error) {
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var from *uint64
	if fl.known {
		c := fl.cur.complete
		from = &c
	}
	fl.h.upstreamOpens.Add(1)
	ch, err := fl.h.cfg.Upstream(uctx, fl.types, from)
	if err != nil {
		return false, err
	}
	defer fl.h.drain(ch, cancel)
	skip := 0
	if !fl.cur.clean() {
		skip = fl.cur.partialCount
	}
	stall := time.NewTimer(fl.h.cfg.StallTimeout)
	defer stall.Stop()
	first := true
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return progressed, errors.New("upstream closed")
			}
			if ev == nil {
				return progressed, errors.New("upstream sent nil")
			}
			stall.Reset(fl.h.cfg.StallTimeout)
			if !first {
				progressed = true
			}
			first = false
			if !fl.known {
				if ev.EventType != api.EventHeartbeat && ev.EventType != api.EventReset {
					return progressed, errors.New("upstream's first event is no heartbeat")
				}
				c := cursor{complete: ev.Index}
				if !handle(ev, c) {
					return progressed, errStop
				}
				fl.cur, fl.known = c, true
				continue
			}
			next, isNew, err := fl.cur.next(ev, &skip)
			if err != nil {
				return progressed, err
			}
			if !isNew {
				continue
			}
			if !handle(ev, next) {
				return progressed, errStop
			}
			fl.cur = next
		case <-stall.C:
			return progressed, errors.New("upstream stalled")
		case <-fl.tick:
			if !fl.onTick() {
				return progressed, errStop
			}
		case <-ctx.Done():
			return progressed, errStop
		}
	}
}

// drain waits, within DrainTimeout, for a cancelled upstream's channel to
// close, so that its goroutines are gone when their owner returns.
func (h *Hub) drain(ch <-chan *api.Event, cancel context.CancelFunc) {
	cancel()
	t := time.NewTimer(h.cfg.DrainTimeout)
	defer t.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-t.C:
			h.logger.Warn("upstream channel still open after its context ended", "timeout", h.cfg.DrainTimeout)
			return
		}
	}
}

// backoff is the jittered wait before reopen number attempt (1, 2, ...).
func (h *Hub) backoff(attempt int) time.Duration {
	d := h.cfg.RetryMin << min(attempt-1, 16)
	if d <= 0 || d > h.cfg.RetryMax {
		d = h.cfg.RetryMax
	}
	return d/2 + rand.N(d/2+1)
}
