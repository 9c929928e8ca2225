package registry

import "github.com/plugreg/plugreg/fsm"

// waitKey is one group of subscriptions: those whose filter takes
// events of plugin type typ (any type when anyType) and name name (any
// name when anyName). An event of type T and name N can match exactly the
// groups {T,N}, {T,any}, {any,N} and {any,any}: four lookups, whatever the
// number of subscriptions.
type waitKey struct {
	typ, name        string
	anyType, anyName bool
}

// waitKeys are the groups a subscription of filter f is in.
func waitKeys(f Filter) []waitKey {
	types, names := f.Types, f.Names
	if len(types) == 0 {
		types = []string{""}
	}
	if len(names) == 0 {
		names = []string{""}
	}
	keys := make([]waitKey, 0, len(types)*len(names))
	for _, t := range types {
		for _, n := range names {
			keys = append(keys, waitKey{typ: t, name: n, anyType: len(f.Types) == 0, anyName: len(f.Names) == 0})
		}
	}
	return keys
}

// eventKeys are the groups an event of type t and name n wakes.
func eventKeys(t, n string) [4]waitKey {
	return [4]waitKey{
		{typ: t, name: n},
		{typ: t, anyName: true},
		{name: n, anyType: true},
		{anyType: true, anyName: true},
	}
}

// waiter is one subscription's place in the journal's waitIndex. Every
// field but wake is guarded by the journal's mu.
type waiter struct {
	keys []waitKey     // the groups it is in, from its filter
	wake chan struct{} // capacity 1: a token when an event woke it
	// joined: it is in its groups (from its first wait to its end).
	joined bool
	// parked: it waits, and no event its filter matches has been applied
	// since it parked at cursor at.
	parked bool
	// woken: an applied batch (or a restore) ended its wait; at is then
	// the index up to which nothing it matches was applied.
	woken bool
	at    uint64
}

func newWaiter(f Filter) *waiter {
	return &waiter{keys: waitKeys(f), wake: make(chan struct{}, 1)}
}

// waitIndex holds the subscriptions of a journal, grouped by what their
// filter takes (waitKey), so an applied event wakes only the waiting ones
// it can match: a write of one type costs nothing to the subscribers of
// the others. A subscription stays in its groups for its life, waiting
// (parked) or not, so a wait costs no more than setting a flag.
type waitIndex struct {
	groups map[waitKey]*waitGroup
	parked int
	// batch numbers the batches wakeFor has seen, so that a group named
	// by many of a batch's events is walked once.
	batch uint64
	// woken are the waiters the current batch woke, whose tokens are
	// sent once the journal's lock is released (takeWoken).
	woken []*waiter
}

// park makes w wait, having read up to cursor.
func (x *waitIndex) park(w *waiter, cursor uint64) {
	if !w.joined {
		x.join(w)
	}
	if !w.parked {
		x.parked++
	}
	w.parked, w.woken, w.at = true, false, cursor
}

// unpark ends w's wait without waking it.
func (x *waitIndex) unpark(w *waiter) {
	if w.parked {
		w.parked = false
		x.parked--
	}
}

// waitGroup is the subscriptions of one waitKey.
type waitGroup struct {
	members map[*waiter]struct{}
	batch   uint64 // the last batch that walked it
}

func (x *waitIndex) join(w *waiter) {
	if x.groups == nil {
		x.groups = map[waitKey]*waitGroup{}
	}
	for _, k := range w.keys {
		g := x.groups[k]
		if g == nil {
			g = &waitGroup{members: map[*waiter]struct{}{}}
			x.groups[k] = g
		}
		g.members[w] = struct{}{}
	}
	w.joined = true
}

// leave takes w out of its groups: its subscription ends.
func (x *waitIndex) leave(w *waiter) {
	x.unpark(w)
	if !w.joined {
		return
	}
	for _, k := range w.keys {
		if g := x.groups[k]; g != nil {
			delete(g.members, w)
			if len(g.members) == 0 {
				delete(x.groups, k) // a type nobody watches holds no memory
			}
		}
	}
	w.joined = false
}

// wakeFor ends the wait of the subscriptions whose filter can match one
// of events, telling each that nothing it matches was applied up to
// before (the batch's first index is after it). Their tokens are sent by
// send.
func (x *waitIndex) wakeFor(events []fsm.Event, before uint64) {
	if x.parked == 0 {
		return
	}
	x.batch++
	for i := range events {
		if events[i].Info == nil {
			continue
		}
		for _, k := range eventKeys(events[i].Info.Type, events[i].Info.Name) {
			g := x.groups[k]
			if g == nil || g.batch == x.batch {
				continue // nobody's, or walked for an earlier event of the batch
			}
			g.batch = x.batch
			for w := range g.members {
				if w.parked {
					x.wakeUp(w, max(w.at, before))
				}
			}
		}
	}
}

// wakeAll ends every wait with its cursor as it was (a restore: whatever
// was read may be gone, so each must read again from there, and reset).
func (x *waitIndex) wakeAll() {
	for _, g := range x.groups {
		for w := range g.members {
			if w.parked {
				x.wakeUp(w, w.at)
			}
		}
	}
}

func (x *waitIndex) wakeUp(w *waiter, at uint64) {
	x.unpark(w)
	w.woken, w.at = true, at
	x.woken = append(x.woken, w)
}

// takeWoken returns the waiters to send a token to, and forgets them.
// Called under the journal's lock; the tokens are sent after it.
func (x *waitIndex) takeWoken() []*waiter {
	w := x.woken
	x.woken = nil
	return w
}

// send gives each of woken its token (a reader that came back for another
// reason meanwhile finds one more token and reads once for nothing).
func send(woken []*waiter) {
	for _, w := range woken {
		select {
		case w.wake <- struct{}{}:
		default: // a token is there already
		}
	}
}
