package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// slowWatcher follows the event stream through the Go client's Watch over
// all three nodes, as an application would, and consumes it slowly: a few
// events a second, now and then a burst. The client's channel (64 events)
// fills, and the client waits on the consumer far longer than its stall
// timeout; what the consumer receives must still be the log's events, in
// order, with no gap and no duplicate. Its stream is recorded as sessions of
// subscriber id in the subscribers' format, so the event checkers check it:
// one session from the start, and a new one at each reset, which names the
// node and the resume index of the connection that sent it (streamTap), so
// the reset rules apply as they do to the raw subscribers.
type slowWatcher struct {
	db    *db
	rec   *recorder
	clock func() int64
	id    int
	seed  int64
	stall time.Duration

	tap     *streamTap
	hurry   chan struct{} // closed: stop dawdling and catch up
	reached atomic.Uint64 // the highest index received, heartbeats included
	events  atomic.Int64  // events received (resets included, heartbeats not)
	// ended is why the stream ended (its Err, or "stopped"), set once
	// run's loop is over: a watcher that does not catch up says whether
	// its stream was still open.
	ended atomic.Pointer[string]
}

func newSlowWatcher(d *db, rec *recorder, clock func() int64, id int, seed int64) *slowWatcher {
	rng := rand.New(rand.NewSource(seed + 2))
	// A short stall timeout: shorter than the time the consumer takes to
	// drain the client's channel, so that the client is blocked on the
	// consumer for longer than it.
	stall := time.Duration(2000+rng.Intn(1000)) * time.Millisecond
	names := map[string]string{}
	for _, n := range d.hosts {
		names[n.HTTP] = n.Name
	}
	base := clientFrom(clientIP, 2*time.Second).Transport
	return &slowWatcher{db: d, rec: rec, clock: clock, id: id, seed: seed, stall: stall,
		tap: &streamTap{base: base, names: names, resets: map[uint64]tapConn{}}, hurry: make(chan struct{})}
}

// run consumes until ctx ends, then records the sessions.
func (w *slowWatcher) run(ctx context.Context) {
	addrs := make([]string, len(w.db.hosts)) // client agents too
	for i, n := range w.db.hosts {
		addrs[i] = n.HTTP
	}
	var sessions []check.Session
	sess := check.Session{Subscriber: w.id, Node: "go-client", Start: w.clock()}
	endReason := "stopped"
	defer func() {
		sess.End, sess.EndReason = w.clock(), endReason
		w.rec.mu.Lock()
		w.rec.sessions = append(append(w.rec.sessions, sessions...), sess)
		w.rec.mu.Unlock()
	}()
	// No overall timeout on the HTTP client: a stream lasts.
	c, err := client.New(client.Config{Addrs: addrs, HTTPClient: &http.Client{Transport: w.tap}})
	if err != nil {
		sess.EndReason = err.Error()
		return
	}
	// JSON: the tap reads the stream's lines to tell which connection a
	// reset came on (the protobuf stream's decoding is covered by
	// client's TestWatchEncodingsAgree). Heartbeats: many entries change
	// no plugin (a new leader's no-op, a configuration change, an
	// unchanged re-registration, a retried request ID, ACL writes), so
	// the last applied index may have no event; a heartbeat says the
	// stream has delivered everything up to its index, and the events
	// checker holds it to that ("heartbeats never run ahead").
	stream := c.Stream(ctx, 0, client.WatchOptions{StallTimeout: w.stall, JSON: true, Heartbeats: true})
	ch := stream.Events()
	pace := newPace(w.seed+3, w.stall)
	for ev := range ch {
		rec := eventRec(ev, w.clock())
		if rec.EventType == "reset" {
			// A new session from the connection that sent the reset.
			sess.End, sess.EndReason = rec.At, "reset"
			sessions = append(sessions, sess)
			from, node := w.tap.resetConn(rec.Index)
			sess = check.Session{Subscriber: w.id, Seq: sess.Seq + 1, Node: node, From: from, Start: rec.At}
		}
		sess.Events = append(sess.Events, rec)
		if rec.EventType != "heartbeat" {
			w.events.Add(1)
		}
		if rec.Index > w.reached.Load() {
			w.reached.Store(rec.Index)
		}
		select {
		case <-time.After(pace.next(time.Now(), len(ch))):
		case <-w.hurry:
		case <-ctx.Done():
		}
	}
	if err := stream.Err(); err != nil {
		endReason = "stopped: " + err.Error()
	}
	w.ended.Store(&endReason)
}

// state says where the watcher stands, for a catch-up that failed: its
// stream's end if it ended, and the last connections it made.
func (w *slowWatcher) state() string {
	var b strings.Builder
	if r := w.ended.Load(); r != nil {
		fmt.Fprintf(&b, "its stream ended (%s); ", *r)
	} else {
		b.WriteString("its stream was open; ")
	}
	b.WriteString("last connections: ")
	b.WriteString(w.tap.recent())
	return b.String()
}

// pace is the slow consumer's rhythm, in cycles: a slow phase of 4-8 s, an
// event every 200-400 ms and, once the client's channel has had time to
// fill, one pause longer than the client's stall timeout; then a burst
// that drains the channel. A consumer that only dawdles would hand the
// client an event every few hundred milliseconds, and each one restarts
// the client's stall timer: only a pause longer than the timeout, with the
// channel full, leaves the client blocked on the consumer past it. The
// bursts keep the consumer within the nodes' journals, so that what it
// misses shows as a gap instead of being covered by a reset.
type pace struct {
	rng       *rand.Rand
	stall     time.Duration
	draining  bool
	phaseFrom time.Time
	phaseTo   time.Time
	paused    bool
}

func newPace(seed int64, stall time.Duration) *pace {
	p := &pace{rng: rand.New(rand.NewSource(seed)), stall: stall}
	p.slow(time.Now())
	return p
}

func (p *pace) slow(now time.Time) {
	p.draining, p.paused = false, false
	p.phaseFrom, p.phaseTo = now, now.Add(time.Duration(4000+p.rng.Intn(4000))*time.Millisecond)
}

// next is how long to wait before the next receive; queued is how many
// events the client's channel holds.
func (p *pace) next(now time.Time, queued int) time.Duration {
	switch {
	case p.draining:
		if queued == 0 {
			p.slow(now)
		}
		return 0
	case now.After(p.phaseTo):
		p.draining = true
		return 0
	case !p.paused && now.Sub(p.phaseFrom) > 2*time.Second:
		p.paused = true
		return p.stall + time.Duration(500+p.rng.Intn(1000))*time.Millisecond
	}
	return time.Duration(200+p.rng.Intn(200)) * time.Millisecond
}

// catchUp stops the dawdling and waits up to bound for the consumer to
// have received an event at index target or later. It reports the index
// reached and whether that is target.
func (w *slowWatcher) catchUp(target uint64, bound time.Duration) (uint64, bool) {
	close(w.hurry)
	deadline := time.Now().Add(bound)
	for w.reached.Load() < target && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	return w.reached.Load(), w.reached.Load() >= target
}

// eventRec is a client event as the checkers take it.
func eventRec(ev *api.Event, at int64) check.EventRec {
	rec := check.EventRec{Index: ev.Index, EventType: string(ev.EventType), At: at}
	plugin := func(p *api.PluginInfo) *check.Plugin {
		if p == nil {
			return nil
		}
		return &check.Plugin{Type: p.Type, Name: p.Name, Alloc: p.AllocID, Value: p.Version, ModifyIndex: p.ModifyIndex}
	}
	rec.Info, rec.Current = plugin(ev.Info), plugin(ev.Current)
	for _, p := range ev.Plugins {
		rec.Plugins = append(rec.Plugins, *plugin(p))
	}
	return rec
}

// streamTap is the slow watcher's HTTP transport. It lets every request
// through, and for each /v1/events connection notes which node serves it,
// from which index, and the index of every reset the node sends on it: a
// reset is checked against the connection it came on, and only the wire
// says which one that was.
type streamTap struct {
	base  http.RoundTripper
	names map[string]string // host:port -> node

	mu     sync.Mutex // guards resets and conns
	resets map[uint64]tapConn
	conns  []*connLog // the last tapKeep connections, oldest first
}

// tapKeep is how many connections the tap remembers for a report.
const tapKeep = 6

// connLog is what one connection did, for a report: when it opened and
// ended, its lines, and the start of its last one.
type connLog struct {
	tapConn
	opened, ended time.Time
	end           string
	lines         int
	last          string    // the first bytes of its last line
	lastAt        time.Time // when that line came
}

// tapConn is one event-stream connection.
type tapConn struct {
	node string
	from uint64
}

func (t *streamTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || req.URL.Path != "/v1/events" {
		return resp, err
	}
	from, _ := strconv.ParseUint(req.URL.Query().Get("index"), 10, 64)
	conn := tapConn{node: t.names[req.URL.Host], from: from}
	log := &connLog{tapConn: conn, opened: time.Now()}
	t.mu.Lock()
	if t.conns = append(t.conns, log); len(t.conns) > tapKeep {
		t.conns = t.conns[1:]
	}
	t.mu.Unlock()
	resp.Body = &tapBody{ReadCloser: resp.Body, tap: t, conn: conn, log: log}
	return resp, nil
}

// recent describes the last connections, oldest first.
func (t *streamTap) recent() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, c := range t.conns {
		p := fmt.Sprintf("%s from %d at %s: %d lines", c.node, c.from, c.opened.Format("15:04:05.000"), c.lines)
		if c.lines > 0 {
			p += fmt.Sprintf(", the last at %s %q", c.lastAt.Format("15:04:05.000"), c.last)
		}
		if c.end != "" {
			p += fmt.Sprintf(", ended at %s (%s)", c.ended.Format("15:04:05.000"), c.end)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// ended notes the end of a connection (its first reason only).
func (t *streamTap) endConn(c *connLog, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.end == "" {
		c.end, c.ended = why, time.Now()
	}
}

// resetConn returns the resume index and the node of the connection that
// sent the reset at index.
func (t *streamTap) resetConn(index uint64) (uint64, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.resets[index]
	if !ok {
		return index, "unknown"
	}
	return c.from, c.node
}

// tapBody watches the lines of one stream go by. Only the start of each
// line is kept: the node writes Index and EventType first.
type tapBody struct {
	io.ReadCloser
	tap  *streamTap
	conn tapConn
	log  *connLog
	head []byte // the current line's first bytes
}

func (b *tapBody) Close() error {
	b.tap.endConn(b.log, "closed by the client")
	return b.ReadCloser.Close()
}

var resetHead = regexp.MustCompile(`^\{"Index":(\d+),"EventType":"reset"`)

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		chunk := rest
		if i >= 0 {
			chunk = rest[:i]
		}
		if room := 64 - len(b.head); room > 0 {
			b.head = append(b.head, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			break
		}
		b.tap.mu.Lock()
		if m := resetHead.FindSubmatch(b.head); m != nil {
			idx, _ := strconv.ParseUint(string(m[1]), 10, 64)
			b.tap.resets[idx] = b.conn
		}
		if b.log != nil {
			b.log.lines++
			b.log.last, b.log.lastAt = string(b.head), time.Now()
		}
		b.tap.mu.Unlock()
		b.head, rest = b.head[:0], rest[i+1:]
	}
	if err != nil && b.log != nil {
		b.tap.endConn(b.log, err.Error())
	}
	return n, err
}
