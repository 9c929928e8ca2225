package registry

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
)

// DefaultSubscriptionBuffer is each subscription channel's capacity.
const DefaultSubscriptionBuffer = 64

// Hub serves subscriptions from a Journal: each Watch starts a goroutine,
// owned by the Hub, that reads the journal and delivers to its channel.
type Hub struct {
	journal *Journal
	buffer  int

	mu       sync.RWMutex // guards shutdown; never held while sending
	shutdown bool
	subs     sync.WaitGroup // one per subscription goroutine
	watchers atomic.Int64   // subscriptions running now
}

// Stats are what the hub and its journal count, for metrics.
type Stats struct {
	// Changes are the events applied on this node since it started, by
	// kind (registered, updated, deregistered, expired, health) and
	// plugin type.
	Changes map[Change]uint64
	// Watchers are the subscriptions running now (watches, event streams,
	// agents' delivery streams).
	Watchers int64
	// Delivered and Resets count what subscriptions handed their
	// consumers since start: events, and resets (a consumer that fell
	// behind the journal, or resumed below it).
	Delivered, Resets uint64
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	j := h.journal
	j.mu.Lock()
	changes := maps.Clone(j.changes)
	j.mu.Unlock()
	return Stats{Changes: changes, Watchers: h.watchers.Load(), Delivered: j.delivered.Load(), Resets: j.resets.Load()}
}

// Watchers is Stats().Watchers, without copying the counts.
func (h *Hub) Watchers() int64 { return h.watchers.Load() }

// NewHub returns a hub over j whose subscription channels hold buffer
// events (zero: DefaultSubscriptionBuffer).
func NewHub(j *Journal, buffer int) (*Hub, error) {
	if j == nil {
		return nil, fmt.Errorf("registry: a hub needs a journal")
	}
	if buffer < 0 {
		return nil, fmt.Errorf("registry: subscription buffer %d is negative", buffer)
	}
	if buffer == 0 {
		buffer = DefaultSubscriptionBuffer
	}
	return &Hub{journal: j, buffer: buffer}, nil
}

// Journal returns the journal the hub reads.
func (h *Hub) Journal() *Journal { return h.journal }

// Watch streams the events after fromIndex that pass filter, or a reset
// first when they are no longer all in the journal; each event is the
// subscriber's own copy. The channel is closed when ctx is done or the hub
// shuts down.
func (h *Hub) Watch(ctx context.Context, filter Filter, fromIndex uint64) (<-chan *api.Event, error) {
	return h.WatchWithHeartbeat(ctx, filter, fromIndex, 0)
}

// WatchWithHeartbeat is Watch with an EventHeartbeat, carrying the
// subscription's position, whenever nothing was sent for every (zero: no
// heartbeats).
func (h *Hub) WatchWithHeartbeat(ctx context.Context, filter Filter, fromIndex uint64, every time.Duration) (<-chan *api.Event, error) {
	return h.watch(ctx, &subscription{filter: filter, cursor: fromIndex, heartbeat: every})
}

// WatchFromState is WatchWithHeartbeat for a consumer whose position this
// node's history does not hold (a cluster restored from a backup is behind
// it): the stream begins with a reset of the state as it is now, then the
// events after it.
func (h *Hub) WatchFromState(ctx context.Context, filter Filter, every time.Duration) (<-chan *api.Event, error) {
	return h.watch(ctx, &subscription{filter: filter, heartbeat: every, fromState: true})
}

// Deliver is WatchWithHeartbeat for a node's front ends (the HTTP stream,
// the plugin socket, client agents' upstreams), which only encode what
// they get: every such subscriber of one event receives the same one, the
// journal's records with its shared encodings (backend.Event), not a
// copy of its own. Read them, never modify them.
func (h *Hub) Deliver(ctx context.Context, filter Filter, fromIndex uint64, every time.Duration) (<-chan backend.Event, error) {
	sub := &subscription{filter: filter, cursor: fromIndex, heartbeat: every, deliver: make(chan backend.Event, h.buffer)}
	if err := h.start(ctx, sub); err != nil {
		return nil, err
	}
	return sub.deliver, nil
}

// DeliverFromState is Deliver beginning with a reset of the state as it
// is now (see WatchFromState).
func (h *Hub) DeliverFromState(ctx context.Context, filter Filter, every time.Duration) (<-chan backend.Event, error) {
	sub := &subscription{filter: filter, heartbeat: every, fromState: true, deliver: make(chan backend.Event, h.buffer)}
	if err := h.start(ctx, sub); err != nil {
		return nil, err
	}
	return sub.deliver, nil
}

func (h *Hub) watch(ctx context.Context, sub *subscription) (<-chan *api.Event, error) {
	sub.out = make(chan *api.Event, h.buffer)
	if err := h.start(ctx, sub); err != nil {
		return nil, err
	}
	return sub.out, nil
}

// start runs sub in a goroutine the hub owns.
func (h *Hub) start(ctx context.Context, sub *subscription) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.shutdown {
		return ErrShutdown
	}
	sub.j, sub.lastSent = h.journal, time.Now()
	sub.waiter, sub.filterKey = newWaiter(sub.filter), sub.filter.key()
	h.subs.Add(1) // under mu: Shutdown cannot be waiting yet
	h.watchers.Add(1)
	// The subscription's own context, ended by the caller's or by the
	// journal's closing: its selects wait on this one channel, no other
	// subscription's. A channel every subscription selects on has its
	// lock taken at every send and wait: with 10,000 subscribers the
	// contention on it would be most of a write's delivery.
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.journal.life, cancel)
	go func() {
		defer h.subs.Done()
		defer h.watchers.Add(-1)
		defer cancel()
		defer stop()
		sub.run(ctx)
	}()
	return nil
}

// IsShutdown reports whether Shutdown was called.
func (h *Hub) IsShutdown() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.shutdown
}

// Shutdown closes the journal and every subscription channel, and waits
// for their goroutines. Idempotent; safe from any goroutine.
func (h *Hub) Shutdown() {
	h.mu.Lock()
	h.shutdown = true
	h.mu.Unlock()
	h.journal.Close()
	h.subs.Wait()
}
