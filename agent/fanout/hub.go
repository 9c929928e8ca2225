package fanout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
)

// Hub fans one upstream per filter out to any number of local
// subscribers. See the package documentation for its promises.
type Hub struct {
	cfg    Config
	logger hclog.Logger
	ctx    context.Context // ends on Close; every feed follows it
	cancel context.CancelFunc
	done   chan struct{} // closed by Close

	// mu guards feeds, closed and every feed's subs and linger. Lock
	// order: Hub.mu before feed.mu.
	mu     sync.Mutex
	feeds  map[string]*feed // by canonical filter
	closed bool
	wg     sync.WaitGroup // feed and subscriber goroutines; Add only under mu with !closed

	upstreamOpens      atomic.Uint64
	passthroughs       atomic.Uint64
	activePassthroughs atomic.Int64
	subscribers        atomic.Int64
	fellBehind         atomic.Uint64
}

// New returns a Hub. It opens nothing until the first Subscribe.
func New(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{
		cfg: cfg, logger: cfg.Logger.Named("fanout"),
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		feeds: make(map[string]*feed),
	}, nil
}

// canonical sorts and de-duplicates types; the result keys the feed.
func canonical(types []string) ([]string, string) {
	t := slices.Clone(types)
	slices.Sort(t)
	t = slices.Compact(t)
	if len(t) == 0 {
		t = nil
	}
	return t, strings.Join(t, ",")
}

// Subscribe returns the events with index > *from (nil: from now) for
// types (none: all), and the position the stream starts at. The channel
// is closed when ctx ends, the hub closes, or the subscriber fell so far
// behind that its next event left the buffer: it then resumes from the
// last index it received, as client.Watch does, and gets the rest from
// the hub or a reset. With heartbeat > 0, a heartbeat carrying the
// subscriber's own position is sent whenever nothing was for that long.
//
// The subscriber is served from its filter's shared upstream when the
// hub's buffer holds every event after *from; otherwise (an older index)
// by a passthrough: its own upstream subscription from *from (the server
// sends a reset if it must), until it has caught up with the buffer and
// moves onto it.
//
// Subscribe waits for the filter's upstream to open; an error wrapping
// ErrUpstream means it could not (the hub keeps trying: retry).
func (h *Hub) Subscribe(ctx context.Context, types []string, from *uint64, heartbeat time.Duration) (<-chan backend.Event, uint64, error) {
	types, key := canonical(types)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, 0, ErrClosed
	}
	f := h.feeds[key]
	if f == nil && h.cfg.MaxUpstreams >= 0 && len(h.feeds) >= h.cfg.MaxUpstreams {
		h.mu.Unlock()
		return nil, 0, fmt.Errorf("%w: %d event filters are open upstream already (at most %d per client agent); subscribe with one of them or none", api.ErrTooManyRequests, len(h.feeds), h.cfg.MaxUpstreams)
	}
	if f == nil {
		f = newFeed(h, key, types)
		h.feeds[key] = f
		h.wg.Add(1)
		go f.run()
	}
	f.subs++
	f.linger.Stop()
	h.mu.Unlock()

	select {
	case <-f.ready:
	case <-ctx.Done():
		h.leave(f)
		return nil, 0, ctx.Err()
	case <-h.done:
		h.leave(f)
		return nil, 0, ErrClosed
	}
	s := &subscriber{h: h, f: f, out: make(chan backend.Event, h.cfg.SubscriberBuffer), heartbeat: heartbeat, lastSent: time.Now()}
	f.mu.Lock()
	if !f.started {
		err := f.startErr
		f.mu.Unlock()
		h.leave(f)
		return nil, 0, fmt.Errorf("%w: %v", ErrUpstream, err)
	}
	var ok bool
	if from == nil {
		s.start = f.pos
	} else {
		s.start = *from
	}
	s.seq, ok = f.seekLocked(s.start, true)
	f.mu.Unlock()

	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.leave(f)
		return nil, 0, ErrClosed
	}
	h.wg.Add(1)
	h.mu.Unlock()
	h.subscribers.Add(1)
	if !ok {
		h.passthroughs.Add(1)
	}
	start := s.start // s is the goroutine's from here on
	go s.run(ctx, !ok)
	return s.out, start, nil
}

// leave detaches a subscriber from f; the last one arms f's linger timer.
func (h *Hub) leave(f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.subs--
	if f.subs == 0 && !h.closed {
		f.linger.Reset(h.cfg.Linger)
	}
}

// retire removes f if it still has no subscriber; f's goroutine then
// returns, closing its upstream.
func (h *Hub) retire(f *feed) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.subs > 0 || h.closed {
		return false
	}
	delete(h.feeds, f.key)
	h.logger.Debug("closing idle upstream", "types", f.types)
	return true
}

// Close ends every subscription (closing its channel) and upstream, and
// waits for the hub's goroutines. Idempotent.
func (h *Hub) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
		h.cancel()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Stats counts what the hub does.
type Stats struct {
	Upstreams          int    // shared upstreams (one per filter) open now
	Subscribers        int    // local subscribers now
	UpstreamOpens      uint64 // Upstream calls: shared, passthrough, reopens
	Passthroughs       uint64 // subscribers that started on a passthrough
	ActivePassthroughs int    // subscribers on a passthrough now
	FellBehind         uint64 // subscribers closed because they fell off the buffer
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	n := len(h.feeds)
	h.mu.Unlock()
	return Stats{
		Upstreams:          n,
		Subscribers:        int(h.subscribers.Load()),
		UpstreamOpens:      h.upstreamOpens.Load(),
		Passthroughs:       h.passthroughs.Load(),
		ActivePassthroughs: int(h.activePassthroughs.Load()),
		FellBehind:         h.fellBehind.Load(),
	}
}
