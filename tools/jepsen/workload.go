package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// recorder keeps the history; every completion is recorded with the
// invocation it completes.
type recorder struct {
	mu           sync.Mutex // guards ops, sessions, stubSessions, leaders
	ops          []check.Op
	sessions     []check.Session
	stubSessions []check.Session // the stub plugins' (stubPlugin)
	leaders      []check.LeaderObs
	leases       []check.Lease // the lease holders' (leaseHolders), once they stopped
	nextID       int
}

func (r *recorder) add(op check.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.ID = r.nextID
	r.nextID++
	r.ops = append(r.ops, op)
}

// workload drives the clients.
type workload struct {
	db          *db
	rec         *recorder
	clock       func() int64
	types       int
	concurrency int
	rate        float64
	staleReads  bool
	seed        int64
	bursts      atomic.Int64 // burst's count, for unique values
}

func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for p := 0; p < w.concurrency; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			w.process(ctx, p)
		}(p)
	}
	wg.Wait()
}

// process is one client: the first half are pinned to one agent, the rest
// move to the next agent after every failure and now and then at random.
// Agents are the servers, then the client agents (hosts): with client
// agents, some pinned clients go through one, and the moving ones pass
// through them in turn.
func (w *workload) process(ctx context.Context, p int) {
	rng := rand.New(rand.NewSource(w.seed*1000 + int64(p)))
	hc := clientFrom(clientIP, 2*time.Second)
	pinned := p < w.concurrency/2
	hosts := w.db.hosts
	nodeIdx := p % len(hosts)
	interval := time.Duration(float64(time.Second) * float64(w.concurrency) / w.rate)
	for seq := 0; ctx.Err() == nil; seq++ {
		t0 := time.Now()
		op := check.Op{Process: p, Node: hosts[nodeIdx].Name, Type: fmt.Sprintf("t%d", rng.Intn(w.types)),
			Name: fmt.Sprintf("n%d", rng.Intn(3)), Alloc: fmt.Sprintf("a%d", rng.Intn(3))}
		switch x := rng.Intn(100); {
		case x < 40:
			op.F, op.Value, op.RequestID = check.FRegister, fmt.Sprintf("p%d-%d", p, seq), fmt.Sprintf("s%d-p%d-%d", w.seed, p, seq)
		case x < 60:
			op.F, op.RequestID = check.FDeregister, fmt.Sprintf("s%d-p%d-%d", w.seed, p, seq)
		case x < 80:
			op.F = check.FGet
		default:
			op.F, op.Name, op.Alloc = check.FList, "", ""
		}
		w.do(ctx, hc, hosts[nodeIdx].HTTP, &op)
		w.rec.add(op)
		if !pinned && (op.Outcome != check.OK || rng.Intn(10) == 0) {
			nodeIdx = (nodeIdx + 1) % len(hosts)
		}
		if d := interval - time.Since(t0); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
}

// burstType is the plugin type of burst's writes: a type of their own, so
// that they add no history to the workload's keys (the linearizability
// checker's partitions).
const burstType = "burst"

// burst writes through node i for d, two clients a write every 10 ms each:
// the write load that some faults need at the leader, where the workload's
// own clients slow down (those that reach a stalled node wait on it). Each
// client writes one name of its own, and every write is recorded as the
// workload's are.
func (w *workload) burst(ctx context.Context, i int, d time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	b := w.bursts.Add(1)
	n := w.db.nodes[i]
	var (
		wg    sync.WaitGroup
		total atomic.Int64
	)
	for c := 0; c < 2; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			hc := clientFrom(clientIP, 2*time.Second)
			for seq := 0; ctx.Err() == nil; seq++ {
				op := check.Op{Process: 2000 + c, Node: n.Name, F: check.FRegister, Type: burstType, Name: fmt.Sprintf("b%d", c), Alloc: "a0",
					Value: fmt.Sprintf("burst%d-%d-%d", b, c, seq), RequestID: fmt.Sprintf("s%d-burst%d-%d-%d", w.seed, b, c, seq)}
				w.do(ctx, hc, n.HTTP, &op)
				w.rec.add(op)
				total.Add(1)
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}(c)
	}
	wg.Wait()
	return int(total.Load())
}

// do performs op against addr and fills in its completion. The outcome is
// honest: a write whose request may have reached the cluster and whose
// answer did not come back is unknown, never failed.
func (w *workload) do(ctx context.Context, hc *http.Client, addr string, op *check.Op) {
	var (
		method = http.MethodGet
		path   string
		body   []byte
	)
	q := url.Values{}
	if w.staleReads && !op.IsWrite() {
		// -unsafe-stale-reads: read stale, but record the read as an
		// ordinary (linearizable) one. The checkers must object.
		q.Set("consistency", "stale")
	}
	switch op.F {
	case check.FRegister:
		method, path = http.MethodPost, "/v1/plugins"
		p := map[string]interface{}{"Type": op.Type, "Name": op.Name, "AllocID": op.Alloc, "Version": op.Value,
			"NodeID": "h1", "ConnectionInfo": map[string]string{"SocketPath": "/run/p.sock"}}
		if op.TTL != "" {
			p["TTL"] = op.TTL
		}
		body, _ = json.Marshal(p)
	case check.FDeregister:
		method, path = http.MethodDelete, "/v1/plugins/"+op.Type+"/"+op.Name+"/"+op.Alloc
	case check.FGet:
		path = "/v1/plugins/" + op.Type + "/" + op.Name + "/" + op.Alloc
	case check.FList:
		path = "/v1/plugins/" + op.Type
	}
	u := "http://" + addr + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), method, u, bytes.NewReader(body))
	if op.RequestID != "" {
		req.Header.Set("X-Plugreg-Request-Id", op.RequestID)
	}
	op.Start = w.clock()
	resp, err := hc.Do(req)
	if err != nil {
		op.End = w.clock()
		op.Error = err.Error()
		op.Outcome = check.Unknown
		if !op.IsWrite() || notSent(err) {
			op.Outcome = check.Fail
		}
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	op.End = w.clock()
	op.Index, _ = strconv.ParseUint(resp.Header.Get("X-Plugreg-Index"), 10, 64)
	if err != nil {
		op.Error, op.Outcome = err.Error(), check.Unknown
		if !op.IsWrite() {
			op.Outcome = check.Fail
		}
		return
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		op.Outcome = check.OK
		switch op.F {
		case check.FRegister, check.FDeregister:
			var r struct {
				Index  uint64
				Result string
			}
			json.Unmarshal(b, &r)
			op.Index, op.Result = r.Index, r.Result
		case check.FGet:
			var p struct{ Version string }
			json.Unmarshal(b, &p)
			op.Found, op.Got = true, p.Version
		case check.FList:
			var ps []struct{ Name, AllocID, Version string }
			json.Unmarshal(b, &ps)
			for _, p := range ps {
				op.List = append(op.List, check.Item{Name: p.Name, Alloc: p.AllocID, Value: p.Version})
			}
		}
	case resp.StatusCode == http.StatusNotFound && op.F == check.FGet:
		op.Outcome, op.Found = check.OK, false
	default:
		var e struct {
			Error   string `json:"error"`
			Code    string `json:"code"`
			Outcome string `json:"outcome"`
		}
		json.Unmarshal(b, &e)
		op.Error = fmt.Sprintf("%d %s: %s", resp.StatusCode, e.Code, e.Error)
		op.Outcome = check.Fail
		if op.IsWrite() && resp.StatusCode >= 500 && e.Outcome != "not_applied" {
			op.Outcome = check.Unknown
		}
	}
}

// notSent reports whether err means the request never left: the
// connection was refused or could not be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// subscribers follow the event stream and record every session.
type subscribers struct {
	db    *db
	rec   *recorder
	clock func() int64
	n     int
	types int
	stall time.Duration
}

// subscriberID is the id of the subscriber pinned to client agent j: after
// the n raw subscribers and the slow watcher (subscriber n).
func subscriberID(n, j int) int { return n + 1 + j }

func (s *subscribers) run(ctx context.Context) {
	var wg sync.WaitGroup
	// One more per client agent, all types, pinned to it: a stream of the
	// agent's fan-out from start to end, whose feed the moving subscriber
	// with all types shares when it passes by.
	for j := range s.db.clients {
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			s.follow(ctx, subscriberID(s.n, j), nil, s.db.clientIndex(j), true)
		}(j)
	}
	for i := 0; i < s.n; i++ {
		var types []string
		switch i % 3 {
		case 0: // all types
		case 1:
			types = []string{"t0"}
		case 2:
			types = []string{"t1", "t2"}
		}
		wg.Add(1)
		go func(i int, types []string) {
			defer wg.Done()
			s.follow(ctx, i, types, i%len(s.db.nodes), i%2 == 1)
		}(i, types)
	}
	wg.Wait()
}

// follow keeps one subscriber connected: it resumes from the last index up
// to which it has every event, on the next agent (servers, then client
// agents) after a failure, or the same one when pinned, as the Go client
// does. It starts on hosts[nodeIdx].
func (s *subscribers) follow(ctx context.Context, id int, types []string, nodeIdx int, pinned bool) {
	hc := &http.Client{Transport: clientFrom(clientIP, 2*time.Second).Transport} // no overall timeout: a stream
	hosts := s.db.hosts
	var complete uint64
	for seq := 0; ctx.Err() == nil; seq++ {
		sess := check.Session{Subscriber: id, Seq: seq, Node: hosts[nodeIdx].Name, Types: types, From: complete, Start: s.clock()}
		complete = s.session(ctx, hc, hosts[nodeIdx].HTTP, &sess, complete)
		sess.End = s.clock()
		s.rec.mu.Lock()
		s.rec.sessions = append(s.rec.sessions, sess)
		s.rec.mu.Unlock()
		if !pinned {
			nodeIdx = (nodeIdx + 1) % len(hosts)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// session reads one connection until it fails, stalls, or ctx ends, and
// returns the new resume point.
func (s *subscribers) session(ctx context.Context, hc *http.Client, addr string, sess *check.Session, complete uint64) uint64 {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q := url.Values{"index": {strconv.FormatUint(complete, 10)}}
	if len(sess.Types) > 0 {
		q.Set("type", strings.Join(sess.Types, ","))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/events?"+q.Encode(), nil)
	resp, err := hc.Do(req)
	if err != nil {
		sess.EndReason = err.Error()
		return complete
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		sess.EndReason = resp.Status
		return complete
	}
	alive := make(chan struct{}, 1)
	go func() { // stall detection
		t := time.NewTimer(s.stall)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-alive:
				t.Reset(s.stall)
			case <-t.C:
				cancel()
				return
			}
		}
	}()
	var partial uint64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<28)
	for sc.Scan() {
		select {
		case alive <- struct{}{}:
		default:
		}
		var raw struct {
			Index     uint64
			EventType string
			Info      *wirePlugin
			Current   *wirePlugin
			Plugins   []wirePlugin
		}
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			sess.EndReason = "bad line: " + err.Error()
			return complete
		}
		ev := check.EventRec{Index: raw.Index, EventType: raw.EventType, At: s.clock(), Info: raw.Info.plugin(), Current: raw.Current.plugin()}
		for _, p := range raw.Plugins {
			ev.Plugins = append(ev.Plugins, *p.plugin())
		}
		sess.Events = append(sess.Events, ev)
		switch ev.EventType {
		case "heartbeat", "reset":
			complete, partial = max(complete, ev.Index), 0
		default:
			if ev.Index != partial && partial > complete {
				complete = partial // the previous index is whole
			}
			partial = ev.Index
		}
	}
	sess.EndReason = "closed"
	if err := sc.Err(); err != nil {
		sess.EndReason = err.Error()
	}
	return complete
}

type wirePlugin struct {
	Type, Name, AllocID, Version string
	ModifyIndex                  uint64
}

func (w *wirePlugin) plugin() *check.Plugin {
	if w == nil {
		return nil
	}
	return &check.Plugin{Type: w.Type, Name: w.Name, Alloc: w.AllocID, Value: w.Version, ModifyIndex: w.ModifyIndex}
}

// observeLeaders records every node's Raft state and term, for the
// one-leader-per-term check.
func observeLeaders(ctx context.Context, d *db, rec *recorder, clock func() int64) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i := range d.nodes {
			if h, err := d.health(ctx, i); err == nil {
				rec.mu.Lock()
				rec.leaders = append(rec.leaders, check.LeaderObs{Node: d.nodes[i].Name, Term: h.Term, State: h.RaftState, At: clock()})
				rec.mu.Unlock()
			}
		}
	}
}
