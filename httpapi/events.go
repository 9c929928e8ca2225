package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/filter"
	"github.com/plugreg/plugreg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// EventJSON is one line of the event stream.
type EventJSON struct {
	Index     uint64
	EventType api.EventType
	Info      *api.PluginInfo   `json:",omitempty"`
	Current   *api.PluginInfo   `json:",omitempty"`
	Plugins   []*api.PluginInfo `json:",omitempty"`
	Error     *api.StreamError  `json:",omitempty"`
}

// MarshalJSON writes Plugins as [] on a reset with no plugins: an empty
// reset is a statement ("nothing exists"), not an omission.
func (e EventJSON) MarshalJSON() ([]byte, error) {
	type plain EventJSON
	if e.EventType == api.EventReset {
		type reset struct {
			plain
			Plugins []*api.PluginInfo
		}
		p := e.Plugins
		if p == nil {
			p = []*api.PluginInfo{}
		}
		return json.Marshal(reset{plain(e), p})
	}
	return json.Marshal(plain(e))
}

// events streams events: GET /v1/events?type=T&index=N[&filter=F]. Without index, the
// stream starts at this node's applied index (only new events). A heartbeat
// carrying the stream's position is sent when nothing else was for the
// heartbeat period. The stream is newline-delimited JSON, or length-delimited
// protobuf (pluginpb.Event) for a client whose Accept header asks for
// api.EventStreamProtobuf: the same events, decoded by a client in a fifth
// of the CPU (docs/api.md).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	types := SplitTypes(v["type"])
	for _, t := range types {
		if err := api.ValidateIdentifier("type", t); err != nil {
			writeError(w, err)
			return
		}
	}
	var from *uint64
	if str := v.Get("index"); str != "" {
		n, err := strconv.ParseUint(str, 10, 64)
		if err != nil {
			writeError(w, fmt.Errorf("%w: index %q is not a number", api.ErrInvalid, str))
			return
		}
		from = &n
	}
	flt, err := filter.Compile(v.Get("filter"))
	if err != nil {
		writeError(w, err)
		return
	}
	if !s.streamSlots.take() {
		writeError(w, limited("event streams", "event_streams"))
		return
	}
	defer s.streamSlots.release()
	enc, contentType := backend.JSON, "application/x-ndjson"
	if acceptsProtobuf(r.Header.Values("Accept")) {
		enc, contentType = backend.Protobuf, api.EventStreamProtobuf
	}
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	ctx, release := s.boundToToken(ctx, r, mayReadTypes(types))
	defer release()

	ch, start, err := s.be.Subscribe(ctx, types, from, s.cfg.Heartbeat)
	if err != nil {
		writeError(w, err)
		return
	}
	// Every write has a deadline: a client that stopped reading must not
	// pin this handler (and its subscription) forever. Heartbeats keep an
	// idle stream writing, so an idle but live client is never cut.
	deadline := func() error { return rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout)) }
	if err := deadline(); err != nil {
		s.logger.Warn("event stream without a write deadline", "error", err)
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set(headerIndex, strconv.FormatUint(start, 10))
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	var sf *streamFilter
	if flt != nil {
		sf = newStreamFilter(flt, s.cfg.Heartbeat, time.Now())
	}
	dt := s.deliveryTracer(r)
	// A deadline per burst (and every 64 events of a long one), set
	// before its first write, not one per event (each a clock read and a
	// poller update): a write still waits at most about
	// StreamWriteTimeout for a client that stopped reading.
	burst := 0
	for ev := range ch {
		if burst%64 == 0 {
			deadline()
		}
		burst++
		if sf == nil {
			if err := writeEvent(w, ev, enc); err != nil {
				countDropped(err)
				return
			}
			dt.delivered(ev)
		} else {
			out, err := sf.pass(ev, time.Now())
			if err != nil {
				s.endWithError(w, rc, enc, err)
				return
			}
			for _, e := range out {
				if err := writeEvent(w, e, enc); err != nil {
					countDropped(err)
					return
				}
				dt.delivered(e)
			}
		}
		// Flush only when nothing else is queued: one syscall per burst.
		if len(ch) == 0 {
			if err := rc.Flush(); err != nil {
				return
			}
			burst = 0
		}
	}
	if err := tokenRefusal(ctx); err != nil {
		s.endWithError(w, rc, enc, err)
	}
}

// endWithError ends a stream the server will not continue (its token was
// refused, boundToToken; its filter ran over its budget) with err as its
// last event, an api.EventError in the stream's own encoding: the client
// reads why, and knows that resuming elsewhere would end the same way.
func (s *Server) endWithError(w io.Writer, rc *http.ResponseController, enc backend.Encoding, err error) {
	// Its own deadline: the stream's last one was set for an earlier burst.
	rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout))
	if writeEvent(w, backend.Unshared(streamError(err)), enc) == nil {
		rc.Flush()
	}
}

// acceptsProtobuf reports whether an Accept header names the protobuf
// event stream. Anything else, or no header, gets JSON: curl and browsers
// see what they always saw.
func acceptsProtobuf(accept []string) bool {
	for _, h := range accept {
		for _, part := range strings.Split(h, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), api.EventStreamProtobuf) {
				return true
			}
		}
	}
	return false
}

// writeEvent writes ev in encoding enc. An event with shared encodings
// goes to every subscriber of this node, so its bytes are encoded once per
// encoding, by whichever stream gets there first; a stream's own events
// (its heartbeats, a reset for its filter) are encoded here.
func writeEvent(w io.Writer, ev backend.Event, enc backend.Encoding) error {
	encode := func() ([]byte, error) { return encodeJSONLine(ev.Event) }
	if enc == backend.Protobuf {
		encode = func() ([]byte, error) { return encodeProtobuf(ev.Event) }
	}
	b, err := ev.Bytes(enc, encode)
	if err != nil {
		return fmt.Errorf("encode event %d: %w", ev.Index, err)
	}
	_, err = w.Write(b)
	return err
}

func encodeJSONLine(ev *api.Event) ([]byte, error) {
	b, err := json.Marshal(EventJSON{Index: ev.Index, EventType: ev.EventType, Info: ev.Info, Current: ev.Current, Plugins: ev.Plugins, Error: ev.Error})
	return append(b, '\n'), err
}

// encodeProtobuf writes ev as a varint length, then the pluginpb.Event
// (protodelim's framing, so any protobuf library can read the stream).
func encodeProtobuf(ev *api.Event) ([]byte, error) {
	m := pluginpb.FromEvent(ev)
	size := proto.Size(m)
	b := protowire.AppendVarint(make([]byte, 0, protowire.SizeVarint(uint64(size))+size), uint64(size))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
}

// streamFilter is one stream's ?filter=: a change is written when its
// Info matches, a reset with the matching instances only, a heartbeat
// always. It is applied here, on whatever the node's hub delivers (a
// server's journal, a client agent's fan-out), so the hubs and the
// upstream streams of a client agent are shared by every filter, and an
// unfiltered stream costs nothing more.
type streamFilter struct {
	f     *filter.Filter
	every time.Duration // the heartbeat period
	// lastWrite is when the stream last wrote; pos is the index of the
	// last event or heartbeat written.
	lastWrite time.Time
	pos       uint64
}

// newStreamFilter is f applied to one stream from now: its budget is the
// stream's (filter.Filter.ForStream).
func newStreamFilter(f *filter.Filter, every time.Duration, now time.Time) *streamFilter {
	f.ForStream(now)
	return &streamFilter{f: f, every: every, lastWrite: now}
}

// pass returns what to write for ev. The hub sends a heartbeat only
// after a quiet period, and a change this filter drops is not quiet to
// it: under a steady flow of changes that do not match, the stream would
// carry nothing, and a client would take it for stalled (and resume from
// an old position). So when a period has passed without a write, a
// change at index X first brings a heartbeat at X-1: every event below X
// has been through the filter. An error is the filter's budget spent:
// the stream must end (endWithError), as delivering what the filter could
// not evaluate, or skipping it, would both mislead the client.
func (sf *streamFilter) pass(ev backend.Event, now time.Time) ([]backend.Event, error) {
	var out []backend.Event
	change := ev.EventType != api.EventHeartbeat && ev.EventType != api.EventReset
	if change && sf.every > 0 && now.Sub(sf.lastWrite) >= sf.every && ev.Index-1 > sf.pos {
		out = append(out, backend.Unshared(&api.Event{Index: ev.Index - 1, EventType: api.EventHeartbeat}))
		sf.pos = ev.Index - 1
	}
	e, ok, err := sf.f.Event(ev.Event, now)
	if err != nil {
		return nil, err
	}
	if ok {
		if e == ev.Event {
			out = append(out, ev) // as every other subscriber gets it: encoded once
		} else {
			out = append(out, backend.Unshared(e)) // this stream's own reset
		}
		sf.pos = max(sf.pos, ev.Index)
	}
	if len(out) > 0 {
		sf.lastWrite = now
	}
	return out, nil
}

// countDropped counts a stream ended because its client stopped reading
// (its write deadline passed) in plugreg_http_streams_dropped_total; a
// client that went away is not counted.
func countDropped(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		metrics.IncrCounter([]string{"http", "streams_dropped"}, 1)
	}
}

// deliveryTracer records, on a server with tracing on, the delivery of a
// traced write's events to one stream as a span of the write's trace
// (events.deliver: from the publish on this node to the event's write to
// the stream); nil (nothing done) otherwise.
type deliveryTracer struct {
	tracer    *tracing.Tracer
	published *tracing.Published
	path      string
	last      uint64 // the last index traced: one span per entry, however many events it made
}

func (s *Server) deliveryTracer(r *http.Request) *deliveryTracer {
	if s.cfg.Tracer == nil {
		return nil
	}
	et, ok := s.cfg.Backend.(interface{ EventTraces() *tracing.Published })
	if !ok || et.EventTraces() == nil {
		return nil // a client agent: its events come from a server's stream
	}
	return &deliveryTracer{tracer: s.cfg.Tracer, published: et.EventTraces(), path: r.URL.RequestURI()}
}

func (d *deliveryTracer) delivered(ev backend.Event) {
	if d == nil || ev.Index == d.last || ev.EventType == api.EventHeartbeat || ev.EventType == api.EventReset {
		return
	}
	span, ok := d.tracer.StartDelivery(d.published, ev.Index)
	if !ok {
		return
	}
	d.last = ev.Index
	if span.IsRecording() {
		span.SetAttributes(attribute.Int64("raft.index", int64(ev.Index)), attribute.String("plugreg.stream", d.path))
	}
	span.End()
}
