package registry

import (
	"slices"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// Filter selects the plugin types a subscription receives. No types means
// every type.
type Filter struct {
	Types []string
	// Shared: the subscriber only reads its events, so change events
	// carry the journal's records (immutable, like the state's) instead
	// of a deep copy each. Every event carries the journal's Memo either
	// way.
	Shared bool
}

// Match reports whether events of plugin type t pass the filter.
func (f Filter) Match(t string) bool {
	return len(f.Types) == 0 || slices.Contains(f.Types, t)
}

func changeEvent(s *slot, shared bool) *api.Event {
	e := &s.ev
	if shared {
		return &api.Event{Index: e.Index, EventType: api.EventType(e.EventType), Info: e.Info, Current: e.Current, Memo: s.memo}
	}
	return &api.Event{Index: e.Index, EventType: api.EventType(e.EventType), Info: e.Info.Copy(), Current: e.Current.Copy(), Memo: s.memo}
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
