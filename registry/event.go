package registry

import (
	"slices"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/delivery"
	"github.com/plugreg/plugreg/fsm"
)

// Filter selects the plugin types a subscription receives. No types means
// every type.
type Filter struct {
	Types []string
}

// Match reports whether events of plugin type t pass the filter.
func (f Filter) Match(t string) bool {
	return len(f.Types) == 0 || slices.Contains(f.Types, t)
}

// sharedEvent is the delivery of e that every subscriber of a delivery
// stream receives: the journal's records (immutable, like the state's)
// and one set of encodings.
func sharedEvent(e *fsm.Event) *delivery.Event {
	return &delivery.Event{
		Event:  &api.Event{Index: e.Index, EventType: api.EventType(e.EventType), Info: e.Info, Current: e.Current},
		Shared: &delivery.Encodings{},
	}
}

// copiedEvent is e for a subscriber of its own, who may change it: a deep
// copy of the records.
func copiedEvent(e *fsm.Event) *api.Event {
	return &api.Event{Index: e.Index, EventType: api.EventType(e.EventType), Info: e.Info.Copy(), Current: e.Current.Copy()}
}

// resetEvent builds the reset for filter from state s.
func resetEvent(s *fsm.State, f Filter) *api.Event {
	ev := &api.Event{Index: s.Index(), EventType: api.EventReset, Plugins: []*api.PluginInfo{}}
	s.WalkTypes(f.Types, func(_, _ string, list []*api.PluginInfo) bool {
		for _, p := range list {
			ev.Plugins = append(ev.Plugins, p.Copy())
		}
		return true
	})
	return ev
}
