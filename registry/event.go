package registry

import (
	"slices"

	"github.com/plugreg/plugreg/fsm"
)

// EventType says what an Event reports.
type EventType string

const (
	EventRegistered   = EventType(fsm.EventRegistered)
	EventUpdated      = EventType(fsm.EventUpdated)
	EventDeregistered = EventType(fsm.EventDeregistered)
	// EventReset replaces everything the subscriber knew: Plugins is the
	// complete state for its filter as of Index, and events continue after
	// Index. It is sent when the subscriber's position is no longer in the
	// journal (it fell behind, or the node restored a snapshot).
	EventReset EventType = "reset"
	// EventHeartbeat carries the node's applied index and no change; the
	// HTTP stream sends it periodically.
	EventHeartbeat EventType = "heartbeat"
)

// Event is one change delivered to a subscriber. All events of one Raft
// entry carry that entry's Index; indexes never decrease within a stream.
type Event struct {
	Index     uint64
	EventType EventType
	// Info is the instance changed (the removed one, for deregistered).
	Info *fsm.PluginInfo `json:",omitempty"`
	// Current is the newest instance of Info's (Type, Name) after the
	// change; nil when the name is gone.
	Current *fsm.PluginInfo `json:",omitempty"`
	// Plugins is the full state for the filter, for EventReset only: every
	// instance, by Type then Name, each recency list newest first.
	Plugins []*fsm.PluginInfo `json:",omitempty"`
}

// Filter selects the plugin types a subscription receives. No types means
// every type.
type Filter struct {
	Types []string
}

// Match reports whether events of plugin type t pass the filter.
func (f Filter) Match(t string) bool {
	return len(f.Types) == 0 || slices.Contains(f.Types, t)
}

func changeEvent(e *fsm.Event) *Event {
	return &Event{Index: e.Index, EventType: EventType(e.EventType), Info: e.Info.Copy(), Current: e.Current.Copy()}
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
