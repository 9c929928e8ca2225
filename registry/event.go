package registry

import (
	"github.com/plugreg/plugreg/api"
	"slices"

	"github.com/plugreg/plugreg/fsm"
)

// Events and their types are wire types: they live in api.
type (
	Event     = api.Event
	EventType = api.EventType
)

const (
	EventRegistered   = api.EventRegistered
	EventUpdated      = api.EventUpdated
	EventDeregistered = api.EventDeregistered
	EventReset        = api.EventReset
	EventHeartbeat    = api.EventHeartbeat
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

func changeEvent(s *slot, shared bool) *Event {
	e := &s.ev
	if shared {
		return &Event{Index: e.Index, EventType: EventType(e.EventType), Info: e.Info, Current: e.Current, Memo: s.memo}
	}
	return &Event{Index: e.Index, EventType: EventType(e.EventType), Info: e.Info.Copy(), Current: e.Current.Copy(), Memo: s.memo}
}

// resetEvent builds the reset for filter from state s.
func resetEvent(s *fsm.State, f Filter) *Event {
	ev := &Event{Index: s.Index(), EventType: EventReset, Plugins: []*fsm.PluginInfo{}}
	s.WalkTypes(f.Types, func(_, _ string, list []*fsm.PluginInfo) bool {
		for _, p := range list {
			ev.Plugins = append(ev.Plugins, p.Copy())
		}
		return true
	})
	return ev
}
