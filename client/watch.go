package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
)

// WatchOptions tune Watch.
type WatchOptions struct {
	// Types to receive; none means all.
	Types []string
	// Filter, when set, delivers only the changes whose instance matches
	// it (and resets with the matching instances): docs/api.md, "Filters".
	// A bad expression is refused by every node, so the stream ends at
	// once with an error matching api.ErrInvalid (EventStream.Err), as it
	// does when the filter runs over the stream's work budget.
	Filter string
	// StallTimeout: a connection silent this long (no event, no heartbeat)
	// is abandoned for the next node. Zero: 15s (three of the server's
	// default heartbeats).
	StallTimeout time.Duration
	// Heartbeats, when set, delivers heartbeat events too.
	Heartbeats bool
	// JSON asks for the JSON lines stream curl sees instead of the
	// protobuf stream (api.EventStreamProtobuf), which costs a fifth of the
	// CPU to decode. The events are the same; it exists to compare the two.
	JSON bool
}

// Watch streams the events after fromIndex. When a node dies or its stream
// stalls, it reconnects to the next node and resumes from the last index it
// delivered, so the channel carries one sequence with no gap and no
// duplicate (or a reset, when the cluster no longer holds the events after
// that index). The channel is closed when ctx is done, or when the token
// is refused (see Stream, which says why).
func (c *Client) Watch(ctx context.Context, fromIndex uint64, opts WatchOptions) <-chan *api.Event {
	return c.Stream(ctx, fromIndex, opts).Events()
}

// EventStream is a running watch (Stream): its events, and why it ended.
type EventStream struct{ w *watcher }

// Stream is Watch, with the reason it ends: read Events until it is
// closed, then Err.
func (c *Client) Stream(ctx context.Context, fromIndex uint64, opts WatchOptions) *EventStream {
	w := &watcher{c: c, opts: opts, out: make(chan *api.Event, 64), cur: api.Cursor{Complete: fromIndex}}
	if w.opts.StallTimeout == 0 {
		w.opts.StallTimeout = 15 * time.Second
	}
	go w.run(ctx)
	return &EventStream{w: w}
}

// Events is the stream's events; it is closed when the stream ends.
func (s *EventStream) Events() <-chan *api.Event { return s.w.out }

// Err is why the stream ended, once Events is closed: nil when its
// context ended; else the refusal of its token, an error matching
// api.ErrPermissionDenied (and api.ErrACLNotFound when the token was deleted),
// or of its request, matching api.ErrInvalid (a bad filter, or one over the
// stream's work budget): the node ended the stream (an api.EventError)
// or refused to open it, and every other node would do the same, so the
// stream does not resume elsewhere.
func (s *EventStream) Err() error { return s.w.err }

// watcher tracks the resume point.
type watcher struct {
	c    *Client
	opts WatchOptions
	out  chan *api.Event
	// cur is advanced only after the event it counts has been handed to
	// the consumer (or, for a heartbeat the consumer did not ask for, once
	// read): a delivery aborted by a stall or a reconnect is then read
	// again on resume, never skipped.
	cur api.Cursor
	// err is why run ended (EventStream.Err): written before out is
	// closed, read after.
	err error
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.out)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		n := w.c.cur.Load()
		progressed, err := w.stream(ctx, w.c.addrs[n])
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, api.ErrPermissionDenied) || errors.Is(err, api.ErrInvalid) {
			// The token or the request, not the node: every node refuses
			// it alike (a bad filter, or one over the stream's budget).
			w.err = err
			return
		}
		w.c.next(n)
		if progressed {
			attempt = 0
		}
		wait := w.c.wait * time.Duration(min(attempt+1, 20))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// stream reads one connection's events until it fails or stalls.
func (w *watcher) stream(ctx context.Context, addr string) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	v := url.Values{}
	if len(w.opts.Types) > 0 {
		v.Set("type", strings.Join(w.opts.Types, ","))
	}
	if w.opts.Filter != "" {
		v.Set("filter", w.opts.Filter)
	}
	v.Set("index", strconv.FormatUint(w.cur.Complete, 10))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/v1/events?"+v.Encode(), nil)
	if err != nil {
		return false, err
	}
	if w.c.token != "" {
		req.Header.Set("X-Plugreg-Token", w.c.token)
	}
	if !w.opts.JSON {
		req.Header.Set("Accept", api.EventStreamProtobuf)
	}
	resp, err := w.c.hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, decodeError(resp)
	}
	// A stalled connection: no line within StallTimeout. The timer runs
	// only while waiting for the server, never while the consumer is slow
	// to take an event: a slow reader is not a dead node.
	stall := time.AfterFunc(w.opts.StallTimeout, cancel)
	defer stall.Stop()
	// A server that does not know the protobuf stream (an older release)
	// answers with JSON lines: the Content-Type says which it is.
	var dec eventDecoder = newJSONDecoder(resp.Body)
	if mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";"); strings.TrimSpace(mt) == api.EventStreamProtobuf {
		dec = newProtobufDecoder(resp.Body)
	}
	// A server that starts the stream below our position says the
	// cluster's history ends before it (api.Cursor.Resumed).
	if start, err := strconv.ParseUint(resp.Header.Get("X-Plugreg-Index"), 10, 64); err == nil {
		w.cur = w.cur.Resumed(start)
	}
	skip := w.cur.Skip()
	for {
		stall.Reset(w.opts.StallTimeout)
		ev, err := dec.next()
		if !stall.Stop() {
			return progressed, fmt.Errorf("watch %s: no event or heartbeat for %v", addr, w.opts.StallTimeout)
		}
		if err != nil {
			if err == io.EOF {
				return progressed, nil
			}
			return progressed, fmt.Errorf("watch %s: %w", addr, err)
		}
		if ev.EventType == api.EventError {
			return progressed, fmt.Errorf("watch %s: the node ended the stream: %w", addr, streamEndError(ev.Error))
		}
		next, deliver, err := w.cur.Next(ev, &skip)
		if err != nil {
			return progressed, fmt.Errorf("watch %s: %w", addr, err)
		}
		if ev.EventType == api.EventHeartbeat {
			deliver = w.opts.Heartbeats
		}
		if deliver {
			select {
			case w.out <- ev:
				progressed = true
			case <-ctx.Done():
				return progressed, ctx.Err()
			}
		}
		w.cur = next
	}
}

// streamEndError is the error an api.EventError carries, as the HTTP
// error the same request would now get: a refusal of the token matches
// api.ErrPermissionDenied (and api.ErrACLNotFound), a filter over its budget
// api.ErrInvalid; any other reason is a failure of that node, and the stream
// resumes elsewhere.
func streamEndError(se *api.StreamError) error {
	if se == nil {
		return errors.New("no reason given")
	}
	k := api.KindOfCode(se.Code)
	return &APIError{StatusCode: k.Status, Code: se.Code, Message: se.Message, Outcome: string(k.Outcome)}
}

// maxEventBytes bounds one event on the wire; a reset carries a whole
// type's state, so it can be large.
const maxEventBytes = 256 << 20

// eventDecoder reads one stream's events; next returns io.EOF at its clean end.
type eventDecoder interface {
	next() (*api.Event, error)
}

type jsonDecoder struct{ sc *bufio.Scanner }

func newJSONDecoder(r io.Reader) *jsonDecoder {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxEventBytes)
	return &jsonDecoder{sc: sc}
}

func (d *jsonDecoder) next() (*api.Event, error) {
	if !d.sc.Scan() {
		if err := d.sc.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	var ev api.Event
	if err := json.Unmarshal(d.sc.Bytes(), &ev); err != nil {
		return nil, fmt.Errorf("bad line: %w", err)
	}
	return &ev, nil
}

// protobufDecoder reads varint-length-delimited pluginpb.Events.
type protobufDecoder struct {
	r   *bufio.Reader
	buf []byte
	m   pluginpb.Event
}

func newProtobufDecoder(r io.Reader) *protobufDecoder {
	return &protobufDecoder{r: bufio.NewReaderSize(r, 64*1024)}
}

func (d *protobufDecoder) next() (*api.Event, error) {
	n, err := binary.ReadUvarint(d.r)
	if err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("event length: %w", err)
	}
	if n > maxEventBytes {
		return nil, fmt.Errorf("event of %d bytes: more than %d", n, maxEventBytes)
	}
	if uint64(cap(d.buf)) < n {
		d.buf = make([]byte, n)
	}
	b := d.buf[:n]
	if _, err := io.ReadFull(d.r, b); err != nil {
		return nil, fmt.Errorf("event body: %w", io.ErrUnexpectedEOF)
	}
	d.m.Reset()
	// The generated decoder (vtprotobuf) reads an event in about half the
	// time and with a third fewer allocations than proto.Unmarshal's
	// reflection (pluginpb.BenchmarkDecodeEvent): a watcher of a busy
	// type spends most of its CPU here.
	if err := d.m.UnmarshalVT(b); err != nil {
		return nil, fmt.Errorf("bad event: %w", err)
	}
	ev := d.m.API()
	if ev.EventType == "" {
		// A kind a newer server added: delivered and counted like any
		// change, as the JSON stream delivers a type string it does not
		// know, never a reason to drop the stream.
		ev.EventType = api.EventType(fmt.Sprintf("kind-%d", d.m.GetKind()))
	}
	if ev.EventType == api.EventReset && ev.Plugins == nil {
		ev.Plugins = []*api.PluginInfo{} // as the JSON stream says it
	}
	return ev, nil
}
