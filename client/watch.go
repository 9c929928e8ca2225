package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
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

// Watch is Stream without the reason it ends: the channel is closed when
// ctx is done, and also when the stream fails for good, silently.
//
// Deprecated: use Stream, and read its Err once Events is closed: a
// refused token or filter, or addresses where no plugreg agent listens,
// end Watch's channel without a word.
func (c *Client) Watch(ctx context.Context, fromIndex uint64, opts WatchOptions) <-chan *api.Event {
	return c.Stream(ctx, fromIndex, opts).Events()
}

// EventStream is a running stream of events (Stream): its events, and
// why it ended.
type EventStream struct{ w *watcher }

// Stream streams the events after fromIndex: read Events until it is
// closed, then Err, as with bufio.Scanner or sql.Rows. When a node dies or
// its stream stalls, it reconnects to the next node and resumes from the
// last index it delivered, so Events carries one sequence with no gap and
// no duplicate (or a reset, when the cluster no longer holds the events
// after that index). It ends when ctx is done, or when no node will ever
// stream it (see Err).
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

// Err is why the stream ended, once Events is closed; nil while it is
// open. It is:
//
//   - the refusal of the stream's token, an error matching
//     api.ErrPermissionDenied (and api.ErrACLNotFound when the token is
//     unknown or was deleted), or of its request, matching api.ErrInvalid
//     (a filter naming no field, a bad expression, one over the stream's
//     work budget): the node refused to open the stream or ended it (an
//     api.EventError), and every other node would do the same, so the
//     stream does not resume elsewhere;
//   - before any node has opened the stream, the failures of every
//     address in a row for reasons waiting does not cure, as a call's
//     (ErrNoAgent: nothing listens; ErrNotPlugreg: what answers is not a
//     plugreg agent; a TLS refusal). Once a node has streamed, such
//     failures are retried: the cluster restarting, say;
//   - ctx's error with the last failure, when ctx's deadline passed while
//     no node was streaming (every node down, or hung without an answer);
//   - nil when ctx ended otherwise: canceled, or past its deadline while a
//     node was streaming.
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
	var (
		// opened: a node has opened the stream once; from then on the
		// failures waiting does not cure in a call are retried.
		opened bool
		// hopeless holds, by address, such failures since the last
		// failure of another kind, until the stream first opens.
		hopeless = map[string]error{}
		// failing is the last attempt's failure, nil while a node streams.
		failing error
	)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		n := w.c.cur.Load()
		addr := w.c.addrs[n]
		progressed, open, err := w.stream(ctx, addr)
		switch {
		case open:
			opened, failing = true, nil
		case err != nil && (ctx.Err() == nil || failing == nil):
			// An attempt cut short by ctx says less than the one before.
			failing = err
		}
		if ctx.Err() != nil {
			if failing != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				w.err = fmt.Errorf("watch: %w while no node streamed (last error: %w)", ctx.Err(), failing)
			}
			return
		}
		if open && err != nil {
			failing = err
		}
		if errors.Is(err, api.ErrPermissionDenied) || errors.Is(err, api.ErrInvalid) {
			// The token or the request, not the node: every node refuses
			// it alike (a bad filter, or one over the stream's budget).
			w.err = err
			return
		}
		w.c.next(n)
		switch {
		case !opened && (nobodyListens(err) || isTLSError(err) || wrongAnswer(err)):
			if hopeless[addr] = err; len(hopeless) == len(w.c.addrs) {
				w.err = unreachable(w.c.addrs, hopeless)
				return
			}
		default:
			clear(hopeless)
		}
		if progressed {
			attempt = 0
		}
		wait := w.c.wait * time.Duration(min(attempt+1, 20))
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && failing != nil {
				w.err = fmt.Errorf("watch: %w while no node streamed (last error: %w)", ctx.Err(), failing)
			}
			return
		case <-time.After(wait):
		}
	}
}

// stream reads one connection's events until it fails or stalls; open
// reports whether the node answered with the stream.
func (w *watcher) stream(ctx context.Context, addr string) (progressed, open bool, err error) {
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
		return false, false, err
	}
	if w.c.token != "" {
		req.Header.Set("X-Plugreg-Token", w.c.token)
	}
	if !w.opts.JSON {
		req.Header.Set("Accept", api.EventStreamProtobuf)
	}
	// A stalled connection: no answer, then no line, within StallTimeout.
	// It runs from the request on (a node that accepts the connection and
	// never answers is as dead as one that falls silent), and only while
	// waiting for the server, never while the consumer is slow to take an
	// event: a slow reader is not a dead node.
	stall := time.AfterFunc(w.opts.StallTimeout, cancel)
	defer stall.Stop()
	resp, err := w.c.hc.Do(req)
	if err != nil {
		if !stall.Stop() {
			return false, false, fmt.Errorf("watch %s: no answer within %v", hostOf(addr), w.opts.StallTimeout)
		}
		return false, false, fmt.Errorf("watch %s: %w", hostOf(addr), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, false, decodeError(resp)
	}
	// A server that does not know the protobuf stream (an older release)
	// answers with JSON lines: the Content-Type says which it is.
	var dec eventDecoder
	switch mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt {
	case api.EventStreamProtobuf:
		dec = newProtobufDecoder(resp.Body)
	case "text/html":
		return false, false, &notPlugregError{addr: hostOf(addr), status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	default:
		dec = newJSONDecoder(resp.Body)
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
			return progressed, true, fmt.Errorf("watch %s: no event or heartbeat for %v", hostOf(addr), w.opts.StallTimeout)
		}
		if err != nil {
			if err == io.EOF {
				return progressed, true, nil
			}
			return progressed, true, fmt.Errorf("watch %s: %w", hostOf(addr), err)
		}
		if ev.EventType == api.EventError {
			return progressed, true, fmt.Errorf("watch %s: the node ended the stream: %w", hostOf(addr), streamEndError(ev.Error))
		}
		next, deliver, err := w.cur.Next(ev, &skip)
		if err != nil {
			return progressed, true, fmt.Errorf("watch %s: %w", hostOf(addr), err)
		}
		if ev.EventType == api.EventHeartbeat {
			deliver = w.opts.Heartbeats
		}
		if deliver {
			select {
			case w.out <- ev:
				progressed = true
			case <-ctx.Done():
				return progressed, true, ctx.Err()
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
