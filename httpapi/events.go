package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/plugreg/plugreg/api"
)

// EventJSON is one line of the event stream.
type EventJSON struct {
	Index     uint64
	EventType api.EventType
	Info      *api.PluginInfo   `json:",omitempty"`
	Current   *api.PluginInfo   `json:",omitempty"`
	Plugins   []*api.PluginInfo `json:",omitempty"`
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

// events streams newline-delimited JSON events: GET /v1/events?type=T&index=N.
// Without index, the stream starts at this node's applied index (only new
// events). A heartbeat line carrying the stream's position is sent when
// nothing else was for the heartbeat period.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	types := splitTypes(v["type"])
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
			writeError(w, fmt.Errorf("%w: index %q is not a number", errBadRequest, str))
			return
		}
		from = &n
	}
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()

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
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set(headerIndex, strconv.FormatUint(start, 10))
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	for ev := range ch {
		deadline()
		if err := writeEvent(w, ev); err != nil {
			return
		}
		// Flush only when nothing else is queued: one syscall per burst.
		if len(ch) == 0 {
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// writeEvent writes ev as one line. An event with a Memo is shared by every
// subscriber of this node, so its line is encoded once, by whichever
// stream gets there first; heartbeats (each stream's own position) are
// encoded here.
func writeEvent(w io.Writer, ev *api.Event) error {
	encode := func() ([]byte, error) {
		b, err := json.Marshal(EventJSON{Index: ev.Index, EventType: ev.EventType, Info: ev.Info, Current: ev.Current, Plugins: ev.Plugins})
		return append(b, '\n'), err
	}
	var line []byte
	var err error
	if ev.Memo != nil {
		line, err = ev.Memo.Bytes(encode)
	} else {
		line, err = encode()
	}
	if err != nil {
		return fmt.Errorf("encode event %d: %w", ev.Index, err)
	}
	_, err = w.Write(line)
	return err
}
