package api

// EventType says what an Event reports.
type EventType string

const (
	EventRegistered   EventType = "registered"
	EventUpdated      EventType = "updated"
	EventDeregistered EventType = "deregistered"
	// EventExpired reports an instance removed because its lease ran out
	// (its TTL passed without a renewal; lease.go). Info is the removed
	// instance and Current the newest left, as for EventDeregistered: a
	// consumer that knows only deregistrations may take it for one.
	EventExpired EventType = "expired"
	// EventHealth reports a change of an instance's health and of nothing
	// else (health.go): Info is the instance with its new Health (nil:
	// passing again), Current the newest instance of its name, as for
	// EventUpdated; the recency order is unchanged. A consumer that knows
	// only updates may take it for one.
	EventHealth EventType = "health"
	// EventReset replaces everything the subscriber knew: Plugins is the
	// complete state for its filter as of Index, and events continue after
	// Index. It is sent when the subscriber's position is no longer in the
	// journal (it fell behind, or the node restored a snapshot).
	EventReset EventType = "reset"
	// EventHeartbeat carries the node's applied index and no change; the
	// HTTP stream sends it periodically.
	EventHeartbeat EventType = "heartbeat"
	// EventError is the last event of a stream the node ended: its caller
	// may no longer read it (its token was deleted, or no longer reads the
	// stream's types), or its filter ran over the stream's work budget.
	// Error says why, with the code of the HTTP error the same request
	// would now get (acl_not_found, permission_denied; invalid for the
	// budget). Its Index is 0, no position: a consumer that does not know
	// the type drops it as an event already seen. Resuming the same
	// request elsewhere ends the same way.
	EventError EventType = "error"
)

// StreamError is why a node ended an event stream (EventError).
type StreamError struct {
	Code    string
	Message string
}

// Event is one change delivered to a subscriber. All events of one Raft
// entry carry that entry's Index; indexes never decrease within a stream.
type Event struct {
	Index     uint64
	EventType EventType
	// Info is the instance changed (the removed one, for deregistered
	// and expired).
	Info *PluginInfo `json:",omitempty"`
	// Current is the newest instance of Info's (Type, Name) after the
	// change; nil when the name is gone.
	Current *PluginInfo `json:",omitempty"`
	// Plugins is the full state for the filter, for EventReset only: every
	// instance, by Type then Name, each recency list newest first.
	Plugins []*PluginInfo `json:",omitempty"`
	// Error is why the stream ended, for EventError only.
	Error *StreamError `json:",omitempty"`
}

// EventStreamProtobuf is the media type of the binary event stream: a client
// that sends it in Accept gets GET /v1/events as length-delimited protobuf
// (each message a varint length, then a pluginpb.Event), not JSON lines.
const EventStreamProtobuf = "application/vnd.plugreg.events+protobuf"

// PluginProtobuf is the media type of a registration body in protobuf: a
// client that sends it as Content-Type with POST /v1/plugins sends one
// pluginpb.PluginInfo instead of a PluginInfo JSON object. Any other
// Content-Type (none included) is read as JSON, which every client sends
// that does not know this type.
const PluginProtobuf = "application/vnd.plugreg.plugin+protobuf"
