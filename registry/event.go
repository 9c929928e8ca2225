package registry

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

// Filter selects the plugins a subscription receives events of: those of
// one of Types (none: every type) and one of Names (none: every name).
// The journal indexes waiting subscriptions by both, so a write wakes only
// the subscriptions whose filter can match it.
type Filter struct {
	Types []string
	Names []string
}

// Match reports whether events of plugin p pass the filter.
func (f Filter) Match(p *api.PluginInfo) bool {
	return (len(f.Types) == 0 || slices.Contains(f.Types, p.Type)) &&
		(len(f.Names) == 0 || slices.Contains(f.Names, p.Name))
}

// key is the filter in one string, equal for filters that select the
// same plugins (the shared resets' key); quoted, so no type or name can
// pass for another list.
func (f Filter) key() string {
	set := func(s []string) string {
		s = slices.Clone(s)
		slices.Sort(s)
		var b strings.Builder
		for _, v := range slices.Compact(s) {
			b.WriteString(strconv.Quote(v))
		}
		return b.String()
	}
	return set(f.Types) + "/" + set(f.Names)
}

// sharedEvent is the delivery of e that every subscriber of a delivery
// stream receives: the journal's records (immutable, like the state's)
// and one set of encodings.
func sharedEvent(e *fsm.Event) *backend.Event {
	return &backend.Event{
		Event:  &api.Event{Index: e.Index, EventType: api.EventType(e.EventType), Info: e.Info, Current: e.Current},
		Shared: &backend.Encodings{},
	}
}

// copiedEvent is e for a subscriber of its own, who may change it: a deep
// copy of the records.
func copiedEvent(e *fsm.Event) *api.Event {
	return &api.Event{Index: e.Index, EventType: api.EventType(e.EventType), Info: e.Info.Copy(), Current: e.Current.Copy()}
}

// resetEvent builds the reset for filter from state s, each plugin a deep
// copy for a subscriber of its own.
func resetEvent(s *fsm.State, f Filter) *api.Event {
	return resetOf(s, f, (*api.PluginInfo).Copy)
}

// resetOf is the reset for filter f from state s, each plugin as keep
// returns it.
func resetOf(s *fsm.State, f Filter, keep func(*api.PluginInfo) *api.PluginInfo) *api.Event {
	ev := &api.Event{Index: s.Index(), EventType: api.EventReset, Plugins: []*api.PluginInfo{}}
	s.WalkTypes(f.Types, func(_, name string, list []*api.PluginInfo) bool {
		if len(f.Names) > 0 && !slices.Contains(f.Names, name) {
			return true
		}
		for _, p := range list {
			ev.Plugins = append(ev.Plugins, keep(p))
		}
		return true
	})
	return ev
}

// sharedReset is the reset of one state for one filter that every
// delivery subscriber needing it receives: the state's records (never
// modified, like a shared event's) and one set of encodings, built by the
// first to ask.
type sharedReset struct {
	once sync.Once
	ev   backend.Event
}

// deliveredReset is the reset of s for f (whose key is key) for a delivery
// stream: shared with every other such stream resetting to the journal's
// current state with the same filter. It is built outside the journal's
// lock (a large state takes a while to walk; Apply must not wait).
func (j *Journal) deliveredReset(s *fsm.State, f Filter, key string) backend.Event {
	j.mu.Lock()
	r := j.sharedResets[key]
	if s != j.state {
		r = &sharedReset{} // an older state's (rare): nobody else will ask
	} else if r == nil {
		r = &sharedReset{}
		if j.sharedResets == nil {
			j.sharedResets = map[string]*sharedReset{}
		}
		j.sharedResets[key] = r
	}
	j.mu.Unlock()
	r.once.Do(func() {
		r.ev = backend.Event{Event: resetOf(s, f, func(p *api.PluginInfo) *api.PluginInfo { return p }), Shared: &backend.Encodings{}}
	})
	return r.ev
}
