package fanout

import (
	"context"
	"errors"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/internal/backoff"
)

// follower reads one filter's upstream from its cursor and reopens it
// when it breaks, so that handle sees one sequence with no gap and no
// duplicate across reconnects. It runs in its owner's goroutine.
type follower struct {
	h     *Hub
	types []string
	cur   api.Cursor
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
type handler func(ev *api.Event, next api.Cursor) bool

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
		fl.h.logger.Debug("upstream ended; reopening", "types", fl.types, "from", fl.cur.Complete, "error", err)
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
		c := fl.cur.Complete
		from = &c
	}
	fl.h.upstreamOpens.Add(1)
	ch, err := fl.h.cfg.Upstream(uctx, fl.types, from)
	if err != nil {
		return false, err
	}
	defer fl.h.drain(ch, cancel)
	skip := fl.cur.Skip()
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
			if first && fl.known && ev.EventType == api.EventHeartbeat {
				// The upstream's first heartbeat is where it starts:
				// below the position only when the cluster's history
				// ends before it (api.Cursor.Resumed).
				fl.cur = fl.cur.Resumed(ev.Index)
				skip = fl.cur.Skip()
			}
			first = false
			if !fl.known {
				if ev.EventType != api.EventHeartbeat && ev.EventType != api.EventReset {
					return progressed, errors.New("upstream's first event is no heartbeat")
				}
				c := api.Cursor{Complete: ev.Index}
				if !handle(ev, c) {
					return progressed, errStop
				}
				fl.cur, fl.known = c, true
				continue
			}
			next, isNew, err := fl.cur.Next(ev, &skip)
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
	return backoff.Jittered(h.cfg.RetryMin, h.cfg.RetryMax, attempt)
}
