package dynamicplugins

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
)

// updatesBuffer is each PluginsUpdatedCh channel's capacity.
const updatesBuffer = 16

// PluginsUpdatedCh streams the events of ptype from now on, in the
// cluster's order, with none dropped: the stream resumes on another node
// when one fails, from the last event delivered. The channel is closed
// when ctx is done or the registry shuts down.
//
// A plugreg stream may also carry a reset (the consumer fell further
// behind than a node's journal, or an operator restored a backup); the
// seed has none, so a reset is delivered as the changes it stands for: a
// deregistration of each instance that is gone, a registration of each
// that is new or changed. To know what is gone the subscription keeps the
// type's instances: it reads the type's history from the start of the
// node's journal (at most a journal's worth of events, or one reset) and
// delivers only what comes after the moment of the call.
func (r *clusterRegistry) PluginsUpdatedCh(ctx context.Context, ptype string) <-chan *PluginUpdateEvent {
	out := make(chan *PluginUpdateEvent, updatesBuffer)
	// "Now" is asked before the call returns, so a write the caller makes
	// after it is an update; if the cluster cannot answer within the
	// timeout, the subscription keeps asking and starts when it does.
	u := &updates{r: r, ptype: ptype, out: out, view: make(map[instanceKey]*api.PluginInfo)}
	callCtx, stopCall := context.WithCancel(r.ctx)
	stopOnCaller := context.AfterFunc(ctx, stopCall) // the caller's ctx bounds it too
	now, nowErr := u.index(callCtx)
	stopOnCaller()
	stopCall()
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.shut {
		close(out)
		return out
	}
	r.subs.Add(1) // under mu: Shutdown cannot be waiting yet
	go func() {
		defer r.subs.Done()
		defer close(out)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(r.ctx, cancel) // Shutdown ends it
		defer stop()
		if nowErr != nil {
			var ok bool
			if now, ok = u.startIndex(ctx); !ok {
				return
			}
		}
		u.now = now
		u.run(ctx)
	}()
	return out
}

type instanceKey struct{ name, allocID string }

func keyOf(p *api.PluginInfo) instanceKey { return instanceKey{p.Name, p.AllocID} }

// updates is one PluginsUpdatedCh subscription.
type updates struct {
	r     *clusterRegistry
	ptype string
	out   chan<- *PluginUpdateEvent
	// now is the index the subscription was made at: events at or below
	// it only build view.
	now  uint64
	view map[instanceKey]*api.PluginInfo
}

func (u *updates) run(ctx context.Context) {
	wctx, cancel := context.WithCancel(ctx)
	events := u.r.c.Stream(wctx, 0, client.WatchOptions{Types: []string{u.ptype}}).Events()
	defer func() {
		cancel()
		for range events { // until the client's watch goroutine is gone
		}
	}()
	for ev := range events {
		if !u.take(ctx, ev) {
			return
		}
	}
}

// index asks the cluster where "now" is: the index of a linearizable
// read of the type, within one call's timeout.
func (u *updates) index(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, u.r.timeout)
	defer cancel()
	_, meta, err := u.r.c.List(ctx, u.ptype, nil)
	if err != nil {
		return 0, err
	}
	return meta.Index, nil
}

// startIndex is index, retried until the cluster answers or ctx ends.
func (u *updates) startIndex(ctx context.Context) (uint64, bool) {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		if now, err := u.index(ctx); err == nil {
			return now, true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(wait):
		}
	}
}

// take folds ev into the view and delivers what it means for the seed's
// consumer (false: the subscription ended).
func (u *updates) take(ctx context.Context, ev *api.Event) bool {
	deliver := ev.Index > u.now
	switch ev.EventType {
	case api.EventRegistered, api.EventUpdated:
		u.view[keyOf(ev.Info)] = ev.Info
		return !deliver || u.send(ctx, EventTypeRegistered, ev.Info)
	case api.EventDeregistered, api.EventExpired:
		// The seed has no leases: an expired instance is gone, as a
		// deregistered one is.
		delete(u.view, keyOf(ev.Info))
		return !deliver || u.send(ctx, EventTypeDeregistered, ev.Info)
	case api.EventHealth:
		// The seed has no health: the instance is still registered, as
		// it was. The view keeps the new copy, and nothing is sent.
		u.view[keyOf(ev.Info)] = ev.Info
		return true
	case api.EventReset:
		return u.reset(ctx, ev, deliver)
	}
	return true
}

// reset replaces the view with ev's plugins and, when deliver, sends the
// difference: each instance gone, then each new or changed.
func (u *updates) reset(ctx context.Context, ev *api.Event, deliver bool) bool {
	next := make(map[instanceKey]*api.PluginInfo, len(ev.Plugins))
	for _, p := range ev.Plugins {
		next[keyOf(p)] = p
	}
	old := u.view
	u.view = next
	if !deliver {
		return true
	}
	u.r.resets.Add(1)
	var gone []*api.PluginInfo
	for k, p := range old {
		if _, ok := next[k]; !ok {
			gone = append(gone, p)
		}
	}
	slices.SortFunc(gone, func(a, b *api.PluginInfo) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.AllocID, b.AllocID))
	})
	for _, p := range gone {
		if !u.send(ctx, EventTypeDeregistered, p) {
			return false
		}
	}
	for _, p := range ev.Plugins {
		was, known := old[keyOf(p)]
		// An instance the consumer was not told of and last changed at
		// or before the call existed as it is when the call was made:
		// not an update (the first event of a stream whose start the
		// journal no longer holds is such a reset).
		if !known && p.ModifyIndex <= u.now {
			continue
		}
		// A change of health only is none to the seed (take).
		changed := !known || was.ModifyIndex != p.ModifyIndex && !api.SameButHealth(was, p)
		if changed && !u.send(ctx, EventTypeRegistered, p) {
			return false
		}
	}
	return true
}

func (u *updates) send(ctx context.Context, t EventType, p *api.PluginInfo) bool {
	select {
	case u.out <- &PluginUpdateEvent{EventType: t, Info: fromAPI(p)}:
		return true
	case <-ctx.Done():
		return false
	}
}
