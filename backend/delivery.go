package backend

import (
	"sync"

	"github.com/plugreg/plugreg/api"
)

// Event is an event as a node's hub hands it to a subscriber.
type Event struct {
	*api.Event
	// Shared holds the encodings every subscriber of this node that
	// receives this event shares; nil for an event of one subscriber's
	// own (its heartbeats, a reset built for its filter).
	Shared *Encodings
}

// Unshared is ev delivered to one subscriber alone: nothing shared.
func Unshared(ev *api.Event) Event { return Event{Event: ev} }

// Encoding names one wire encoding of events; Encodings holds one of each.
type Encoding uint8

const (
	JSON     Encoding = iota // a line of newline-delimited JSON
	Protobuf                 // a length-delimited pluginpb.Event
	Upstream                 // a stream value to a client agent (transport.Encode)
	numEncodings
)

// Encodings holds the wire encodings of one event, each made by the first
// subscriber that asks for it and reused by the others. The zero value is
// ready to use.
type Encodings struct {
	slots [numEncodings]slot
}

type slot struct {
	once sync.Once
	b    []byte
	err  error
}

// Bytes returns the shared encoding e, calling encode the first time.
// Every caller must pass, for one e, an encode that yields the same bytes.
func (m *Encodings) Bytes(e Encoding, encode func() ([]byte, error)) ([]byte, error) {
	s := &m.slots[e]
	s.once.Do(func() { s.b, s.err = encode() })
	return s.b, s.err
}

// Bytes returns the event's encoding e: the shared one when the event has
// Shared, else encode's.
func (e Event) Bytes(enc Encoding, encode func() ([]byte, error)) ([]byte, error) {
	if e.Shared == nil {
		return encode()
	}
	return e.Shared.Bytes(enc, encode)
}
