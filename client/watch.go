package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/plugreg/plugreg/api"
)

// WatchOptions tune Watch.
type WatchOptions struct {
	// Types to receive; none means all.
	Types []string
	// StallTimeout: a connection silent this long (no event, no heartbeat)
	// is abandoned for the next node. Zero: 15s (three of the server's
	// default heartbeats).
	StallTimeout time.Duration
	// Heartbeats, when set, delivers heartbeat events too.
	Heartbeats bool
}

// Watch streams the events after fromIndex. When a node dies or its stream
// stalls, it reconnects to the next node and resumes from the last index it
// delivered, so the channel carries one sequence with no gap and no
// duplicate (or a reset, when the cluster no longer holds the events after
// that index). The channel is closed when ctx is done.
func (c *Client) Watch(ctx context.Context, fromIndex uint64, opts WatchOptions) <-chan *Event {
	out := make(chan *Event, 64)
	w := &watcher{c: c, opts: opts, out: out, cur: api.Cursor{Complete: fromIndex}}
	if w.opts.StallTimeout == 0 {
		w.opts.StallTimeout = 15 * time.Second
	}
	go w.run(ctx)
	return out
}

// watcher tracks the resume point.
type watcher struct {
	c    *Client
	opts WatchOptions
	out  chan *Event
	// cur is advanced only after the event it counts has been handed to
	// the consumer (or, for a heartbeat the consumer did not ask for, once
	// read): a delivery aborted by a stall or a reconnect is then read
	// again on resume, never skipped.
	cur api.Cursor
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.out)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		n := w.c.cur.Load()
		progressed, err := w.stream(ctx, w.c.addrs[n])
		if ctx.Err() != nil {
			return
		}
		_ = err
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
	v.Set("index", strconv.FormatUint(w.cur.Complete, 10))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/v1/events?"+v.Encode(), nil)
	if err != nil {
		return false, err
	}
	if w.c.token != "" {
		req.Header.Set("X-Plugreg-Token", w.c.token)
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
	skip := w.cur.Skip()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 256*1024*1024) // a reset can be large
	for {
		stall.Reset(w.opts.StallTimeout)
		more := sc.Scan()
		if !stall.Stop() {
			return progressed, fmt.Errorf("watch %s: no event or heartbeat for %v", addr, w.opts.StallTimeout)
		}
		if !more {
			return progressed, sc.Err()
		}
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return progressed, fmt.Errorf("watch %s: bad line: %w", addr, err)
		}
		next, deliver, err := w.cur.Next(&ev, &skip)
		if err != nil {
			return progressed, fmt.Errorf("watch %s: %w", addr, err)
		}
		if ev.EventType == api.EventHeartbeat {
			deliver = w.opts.Heartbeats
		}
		if deliver {
			select {
			case w.out <- &ev:
				progressed = true
			case <-ctx.Done():
				return progressed, ctx.Err()
			}
		}
		w.cur = next
	}
}
