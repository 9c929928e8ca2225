package registry

import "github.com/plugreg/plugreg/fsm"

// waitKey is one group of parked subscriptions: those whose filter takes
// events of plugin type typ (any type when anyType) and name name (any
// name when anyName). An event of type T and name N can match exactly the
// groups {T,N}, {T,any}, {any,N} and {any,any}: four lookups, whatever the
// number of subscriptions.
type waitKey struct {
	typ, name        string
	anyType, anyName bool
}

// waitKeys are the groups a subscription of filter f parks in.
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
	keys []waitKey     // the groups it parks in, from its filter
	wake chan struct{} // capacity 1: a token when an event woke it
	// parked: it is in its groups now, and no event its filter matches
	// has been applied since it parked at cursor at.
	parked bool
	// woken: an applied batch (or a restore) took it out of its groups;
	// at is then the index up to which nothing it matches was applied.
	woken bool
	at    uint64
}

func newWaiter(f Filter) *waiter {
	return &waiter{keys: waitKeys(f), wake: make(chan struct{}, 1)}
}

// waitIndex holds the subscriptions that read everything up to the
// journal's state and wait for more, grouped by what their filter takes
// (waitKey), so an applied event wakes only those it can match: a write
// of one type costs nothing to the subscribers of the others.
type waitIndex struct {
	groups map[waitKey]map[*waiter]struct{}
	parked int
}

// park puts w in its groups, having read up to cursor.
func (x *waitIndex) park(w *waiter, cursor uint64) {
	if x.groups == nil {
		x.groups = map[waitKey]map[*waiter]struct{}{}
	}
	for _, k := range w.keys {
		g := x.groups[k]
		if g == nil {
			g = map[*waiter]struct{}{}
			x.groups[k] = g
		}
		g[w] = struct{}{}
	}
	w.parked, w.woken, w.at = true, false, cursor
	x.parked++
}

// unpark takes w out of its groups.
func (x *waitIndex) unpark(w *waiter) {
	if !w.parked {
		return
	}
	for _, k := range w.keys {
		g := x.groups[k]
		delete(g, w)
		if len(g) == 0 {
			delete(x.groups, k) // a type nobody waits for holds no memory
		}
	}
	w.parked = false
	x.parked--
}

// wakeFor wakes the subscriptions whose filter can match e, telling each
// that nothing it matches was applied up to before (e's batch began
// after it).
func (x *waitIndex) wakeFor(e *fsm.Event, before uint64) {
	if x.parked == 0 || e.Info == nil {
		return
	}
	for _, k := range eventKeys(e.Info.Type, e.Info.Name) {
		for w := range x.groups[k] {
			x.wake(w, max(w.at, before))
		}
	}
}

// wakeAll wakes every parked subscription with its cursor as it was (a
// restore: whatever it had read may be gone, so it must read again from
// there, and reset).
func (x *waitIndex) wakeAll() {
	for _, g := range x.groups {
		for w := range g {
			x.wake(w, w.at)
		}
	}
}

func (x *waitIndex) wake(w *waiter, at uint64) {
	x.unpark(w)
	w.woken, w.at = true, at
	select {
	case w.wake <- struct{}{}:
	default: // a token is there already
	}
}
