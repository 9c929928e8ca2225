package api

import "sync"

// EventType says what an Event reports.
type EventType string

const (
	EventRegistered   EventType = "registered"
	EventUpdated      EventType = "updated"
	EventDeregistered EventType = "deregistered"
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
	Info *PluginInfo `json:",omitempty"`
	// Current is the newest instance of Info's (Type, Name) after the
	// change; nil when the name is gone.
	Current *PluginInfo `json:",omitempty"`
	// Plugins is the full state for the filter, for EventReset only: every
	// instance, by Type then Name, each recency list newest first.
	Plugins []*PluginInfo `json:",omitempty"`
	// Memo, when set, is shared by every subscriber of one node that
	// receives this event (the registry sets it on change events): a
	// front end that encodes events for the wire encodes each one once,
	// not once per subscriber. Never on the wire.
	Memo *Memo `json:"-" codec:"-"`
}

// EventStreamProtobuf is the media type of the binary event stream: a client
// that sends it in Accept gets GET /v1/events as length-delimited protobuf
// (each message a varint length, then a pluginpb.Event), not JSON lines.
const EventStreamProtobuf = "application/vnd.plugreg.events+protobuf"

// Encoding names one wire encoding of events; a Memo holds one of each.
type Encoding uint8

const (
	EncodingJSON     Encoding = iota // a line of newline-delimited JSON
	EncodingProtobuf                 // a length-delimited pluginpb.Event
	numEncodings
)

// Memo holds the wire encodings of an event, each made by the first
// subscriber that asks for it and reused by the others.
type Memo struct {
	slots [numEncodings]memoSlot
}

type memoSlot struct {
	once sync.Once
	b    []byte
	err  error
}

// Bytes returns the memoized encoding e, calling encode the first time.
// Every caller must pass, for one e, an encode that yields the same bytes.
func (m *Memo) Bytes(e Encoding, encode func() ([]byte, error)) ([]byte, error) {
	s := &m.slots[e]
	s.once.Do(func() { s.b, s.err = encode() })
	return s.b, s.err
}
