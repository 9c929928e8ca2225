package registry

import (
	"container/heap"
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

// DefaultJournalSize is the number of events a Journal keeps.
const DefaultJournalSize = 65536

// sharedWindow is how many of the newest events keep the shared event and
// encodings their first delivery made (slot.shared). Live subscribers
// read well within it, so each event is still encoded once per node; a
// reader catching up from further back gets a shared event of its own
// for each older event, not kept. Kept for the whole ring, the
// encodings would cost what -journal-size allows rather than what anyone
// still reads: at 1,000 hosts, 28 % of a server's live heap, in events
// every stream had read long before.
const sharedWindow = 8192

// Journal is a node's bounded, in-memory record of the events its FSM
// applied, in log order: a ring of the last N events. It implements
// fsm.Sink. Because every node applies the same log, every node's journal
// holds the same sequence (over the range it retains).
//
// A subscription is a cursor (an index: everything at or below it has been
// delivered) that reads from the journal. When the cursor falls below the
// journal's floor, the events after it are gone and the reader gets the
// current state instead: see read.
type Journal struct {
	// observe, set before the first apply (OnApplied), sees each applied
	// batch before it is published and once it is.
	observe func(s *fsm.State, events []fsm.Event) (published func())

	mu    sync.Mutex // guards every field below; never held while sending
	ring  []slot
	start int // position of the oldest event in ring
	n     int // events held
	floor uint64
	state *fsm.State
	// waiting are the subscriptions that have read everything and wait
	// for more, by what their filter takes: an applied event wakes only
	// those it can match.
	waiting waitIndex
	// sharedResets are the shared resets (Hub.Deliver's) of state, by filter
	// (Filter.key): every delivery subscriber that falls off the journal
	// at one state, a restore's thousands at once, gets one reset built
	// and encoded once. Emptied when another state is published.
	sharedResets map[string]*sharedReset
	// aclNotify is closed and replaced when a state with other ACL tokens
	// is published (ACLChanged).
	aclNotify chan struct{}
	// waiters are the writes waiting for this node to apply their index
	// (WaitForIndex), lowest index first: an applied batch wakes only
	// those it reached, not every waiter (etcd's wait registry). Under
	// load a follower holds a waiter per forwarded write, and waking them
	// all at every batch cost each a wake-up and a sleep per batch.
	waiters indexWaiters
	closed  bool
	// life ends when the journal is closed: its Done channel is the
	// journal's, and each subscription's context is cut off with it.
	life    context.Context
	endLife context.CancelFunc
	// changes counts the events applied, by kind and plugin type, since
	// the journal began (metrics); types past MaxCountedTypes are counted
	// under OtherTypes.
	changes map[Change]uint64
	types   map[string]bool // the types changes has by name

	// What subscriptions sent, for metrics: their own goroutines add to
	// these, once per batch.
	delivered, resets atomic.Uint64
}

// indexWaiter is one WaitForIndex call: ch is closed once index applied.
type indexWaiter struct {
	index uint64
	ch    chan struct{}
}

// indexWaiters is a min-heap of waiters by index (container/heap).
type indexWaiters []indexWaiter

func (h indexWaiters) Len() int           { return len(h) }
func (h indexWaiters) Less(i, k int) bool { return h[i].index < h[k].index }
func (h indexWaiters) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *indexWaiters) Push(x any)        { *h = append(*h, x.(indexWaiter)) }
func (h *indexWaiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

var _ fsm.Sink = (*Journal)(nil)

// NewJournal returns a journal that keeps the last size events (size <= 0
// means DefaultJournalSize).
func NewJournal(size int) *Journal {
	if size <= 0 {
		size = DefaultJournalSize
	}
	life, endLife := context.WithCancel(context.Background())
	return &Journal{
		ring:      make([]slot, size),
		state:     fsm.NewState(),
		aclNotify: make(chan struct{}),
		life:      life,
		endLife:   endLife,
		changes:   map[Change]uint64{},
		types:     map[string]bool{},
	}
}

// OnApplied makes observe see each batch Applied publishes: called before
// the batch is published, and the func it returns once it is (tracing's
// publish spans: package cluster). Set it before the first apply; it runs
// on the FSM's goroutine.
func (j *Journal) OnApplied(observe func(s *fsm.State, events []fsm.Event) (published func())) {
	j.observe = observe
}

// Applied appends a batch's events and wakes the subscriptions they can
// match. It never blocks on a reader: readers hold mu only to copy events
// out.
func (j *Journal) Applied(s *fsm.State, events []fsm.Event) {
	if j.observe != nil {
		if published := j.observe(s, events); published != nil {
			defer published()
		}
	}
	j.mu.Lock()
	j.waiting.wakeFor(events, j.state.Index())
	for _, e := range events {
		if j.n == len(j.ring) {
			// Evict the oldest. Its index may still have events in the
			// ring; the floor makes a reader below it reset rather than
			// see half an entry.
			j.floor = max(j.floor, j.ring[j.start].ev.Index)
			j.ring[j.start] = slot{}
			j.start = (j.start + 1) % len(j.ring)
			j.n--
		}
		j.ring[(j.start+j.n)%len(j.ring)] = slot{ev: e}
		j.n++
		if j.n > sharedWindow {
			j.ring[(j.start+j.n-1-sharedWindow)%len(j.ring)].shared = nil
		}
		j.countLocked(e)
	}
	j.publishLocked(s)
	woken := j.waiting.takeWoken()
	j.mu.Unlock()
	// Their reads would only queue on mu behind this batch.
	send(woken)
}

// Change is what Stats counts an applied event under.
type Change struct {
	Kind api.EventType
	Type string // the plugin type, or OtherTypes
}

// MaxCountedTypes bounds the plugin types counted by name (the API does not
// bound types; a metric's series must be): the first ones seen, as the
// coverage gauge shows the first ones.
const MaxCountedTypes = 1000

// OtherTypes is the type every type past MaxCountedTypes is counted as.
const OtherTypes = "_other"

func (j *Journal) countLocked(e fsm.Event) {
	typ := ""
	if e.Info != nil {
		typ = e.Info.Type
	}
	if !j.types[typ] {
		if len(j.types) >= MaxCountedTypes {
			typ = OtherTypes
		} else {
			j.types[typ] = true
		}
	}
	j.changes[Change{e.EventType, typ}]++
}

// Restored empties the journal: the events between the old state and the
// restored one were never seen here, so every reader below the restored
// index must reset.
func (j *Journal) Restored(s *fsm.State) {
	j.mu.Lock()
	clear(j.ring)
	j.start, j.n = 0, 0
	j.floor = s.Index()
	j.waiting.wakeAll()
	j.publishLocked(s)
	woken := j.waiting.takeWoken()
	j.mu.Unlock()
	send(woken)
}

// publishLocked makes s the journal's state and wakes whoever waits on it.
func (j *Journal) publishLocked(s *fsm.State) {
	if !s.SameACL(j.state) {
		close(j.aclNotify)
		j.aclNotify = make(chan struct{})
	}
	if s != j.state {
		clear(j.sharedResets)
	}
	j.state = s
	j.wakeLocked()
}

// ACLChanged returns a channel closed once a state with other ACL tokens
// than the current one is published (a token created or deleted, a
// snapshot restored): the HTTP API re-checks the tokens of its open
// streams and blocking queries then, not per event. Take the channel
// before reading the tokens, so a change in between is not missed.
func (j *Journal) ACLChanged() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.aclNotify
}

// wakeLocked wakes the index waiters the state reached (subscriptions are
// woken as their events are added).
func (j *Journal) wakeLocked() {
	applied := j.state.Index()
	for len(j.waiters) > 0 && j.waiters[0].index <= applied {
		close(heap.Pop(&j.waiters).(indexWaiter).ch)
	}
}

// Close wakes every reader and makes it return. Idempotent.
func (j *Journal) Close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.closed {
		j.closed = true
		j.endLife()
	}
}

// Done is closed when the journal is closed.
func (j *Journal) Done() <-chan struct{} { return j.life.Done() }

// State returns the latest state the FSM published, and so its index.
func (j *Journal) State() *fsm.State {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.state
}

// WaitForIndex returns once this node has applied index, or with ctx's
// error, or ErrShutdown.
func (j *Journal) WaitForIndex(ctx context.Context, index uint64) (*fsm.State, error) {
	j.mu.Lock()
	s, closed := j.state, j.closed
	if s.Index() >= index {
		j.mu.Unlock()
		return s, nil
	}
	if closed {
		j.mu.Unlock()
		return nil, ErrShutdown
	}
	ch := make(chan struct{})
	heap.Push(&j.waiters, indexWaiter{index: index, ch: ch})
	j.mu.Unlock()
	select {
	case <-ch:
		return j.State(), nil
	case <-ctx.Done():
		// Out of the heap: a node cut off from its leader applies
		// nothing for as long as the cut lasts, while every write it
		// forwarded meanwhile gives up and leaves a waiter.
		j.forget(ch)
		return nil, ctx.Err()
	case <-j.life.Done():
		return nil, ErrShutdown
	}
}

// forget removes the waiter of ch, if the applied index has not woken
// (and removed) it already. A linear search: waiters are the writes in
// flight on this node.
func (j *Journal) forget(ch chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, w := range j.waiters {
		if w.ch == ch {
			heap.Remove(&j.waiters, i)
			return
		}
	}
}

// slot is one event in the journal's ring and, once a read for a
// delivery (Hub.Deliver) has passed it on, the one api.Event every such
// subscriber receives and the encodings they share: Apply does not pay for
// them.
type slot struct {
	ev     fsm.Event
	shared *backend.Event
}

// batch is what one read hands a subscription.
type batch struct {
	reset  *fsm.State // non-nil: deliver a reset from this state first
	events []slot     // then these, all passing the filter
	cursor uint64     // the subscription's new cursor
	wait   <-chan struct{}
	closed bool
}

// read returns what follows cursor for filter: a reset when cursor is below
// the floor, else up to limit matching events (never part of an index's
// events), and once it has read to the end a channel to wait on, w's,
// having parked w in the journal's waiting index. Events with no match
// still advance the cursor.
func (j *Journal) read(w *waiter, cursor uint64, f Filter, shared bool, limit int) batch {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return batch{closed: true}
	}
	cursor = j.settleLocked(w, cursor)
	if cursor < j.floor {
		return batch{reset: j.state, cursor: j.state.Index()}
	}
	at := func(i int) *slot { return &j.ring[(j.start+i)%len(j.ring)] }
	i := sort.Search(j.n, func(i int) bool { return at(i).ev.Index > cursor })
	var out []slot
	for ; i < j.n; i++ {
		e := at(i)
		if len(out) >= limit && e.ev.Index != out[len(out)-1].ev.Index {
			return batch{events: out, cursor: out[len(out)-1].ev.Index}
		}
		if f.Match(e.ev.Info) {
			s := *e
			if shared && s.shared == nil {
				s.shared = sharedEvent(&e.ev)
				if i >= j.n-sharedWindow {
					e.shared = s.shared // under mu, like every ring access
				}
			}
			out = append(out, s)
		}
	}
	// Scanned to the end: every entry up to the state's index is covered,
	// including entries without events. The reader parks even with
	// events to hand over: a matching event applied while it sends them
	// wakes it, so once they are sent it waits without reading again
	// only to find nothing.
	b := batch{events: out, cursor: max(cursor, j.state.Index())}
	j.waiting.park(w, b.cursor)
	b.wait = w.wake
	return b
}

// settleLocked takes w out of the waiting index and returns where its
// reader stands: past every event applied since it parked when none of
// them woke it (so a subscriber of a quiet type is never reset because
// the ring moved on past events it never wanted), else at the batch that
// woke it.
func (j *Journal) settleLocked(w *waiter, cursor uint64) uint64 {
	switch {
	case w.parked:
		j.waiting.unpark(w)
		cursor = max(cursor, w.at, j.state.Index())
	case w.woken:
		cursor = max(cursor, w.at)
		select {
		case <-w.wake: // the token of this wake, if the reader came for another reason
		default:
		}
	}
	w.woken = false
	return cursor
}

// leave takes w out of the waiting index for good: its subscription ends.
func (j *Journal) leave(w *waiter) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.waiting.leave(w)
}
