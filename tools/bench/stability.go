package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// The stability run answers one question: do the servers' Raft timeouts
// hold on this machine, under load and at rest, without a leader change
// nobody asked for? It runs -stability-clients writers for
// -stability-load, then nothing for -stability-idle, and polls every
// server's /v1/health once a second for its term and the leader it
// follows. Nothing is killed or cut, so every term after the first is a
// spurious election (hashicorp/raft's pre-vote keeps a follower that only
// timed out from raising the term unless it could win).

// leaderChange is one change seen by the poller: a node's term or leader
// moved.
type leaderChange struct {
	AtSeconds float64 `json:"at_seconds"`
	Phase     string  `json:"phase"`
	Node      string  `json:"node"`
	Term      uint64  `json:"term"`
	Leader    string  `json:"leader"`
	Was       string  `json:"was"`
}

type stabilityReport struct {
	Clients     int            `json:"clients"`
	LoadSeconds float64        `json:"load_seconds"`
	IdleSeconds float64        `json:"idle_seconds"`
	Writes      stats          `json:"writes"`
	Polls       int            `json:"polls"`
	PollErrors  int            `json:"poll_errors"`
	FirstTerm   uint64         `json:"first_term"`
	LastTerm    uint64         `json:"last_term"`
	TermsLoad   uint64         `json:"new_terms_under_load"`
	TermsIdle   uint64         `json:"new_terms_idle"`
	Changes     []leaderChange `json:"changes"`
	Flags       []string       `json:"plugreg_flags"`
}

func runStability(ctx context.Context, o *options, pc *plugregCluster) (*stabilityReport, error) {
	rep := &stabilityReport{Clients: o.stabilityClients, Flags: o.plugregFlags}
	s := &plugregSystem{c: pc}
	ws, err := newWriters(s, o.stabilityClients, 0)
	if err != nil {
		return nil, err
	}
	defer ws.close()

	type seen struct {
		term   uint64
		leader string
	}
	last := map[string]seen{}
	phase := "load"
	var termAtIdle uint64
	start := time.Now()
	poll := func() {
		rep.Polls++
		for _, n := range pc.nodes {
			hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			h, err := pc.health(hctx, n)
			cancel()
			if err != nil {
				rep.PollErrors++
				logf("stability: %s: %v", n.id, err)
				continue
			}
			if rep.Polls == 1 {
				rep.FirstTerm = max(rep.FirstTerm, h.Term)
			}
			rep.LastTerm = max(rep.LastTerm, h.Term)
			prev, ok := last[n.id]
			if ok && (prev.term != h.Term || prev.leader != h.Leader) {
				c := leaderChange{AtSeconds: time.Since(start).Seconds(), Phase: phase, Node: n.id, Term: h.Term, Leader: h.Leader, Was: fmt.Sprintf("term %d leader %q", prev.term, prev.leader)}
				rep.Changes = append(rep.Changes, c)
				logf("stability: %s: %s", n.id, fmtChange(c))
			}
			last[n.id] = seen{h.Term, h.Leader}
		}
	}

	// Poll on its own goroutine, owned here: stopped and waited for
	// before the report is read.
	pollCtx, stopPoll := context.WithCancel(ctx)
	var phaseMu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			phaseMu.Lock()
			poll()
			phaseMu.Unlock()
			select {
			case <-pollCtx.Done():
				return
			case <-t.C:
			}
		}
	}()

	logf("stability: %d writers for %s, then idle for %s", o.stabilityClients, o.stabilityLoad, o.stabilityIdle)
	// Each worker registers an instance and deregisters it on its next
	// operation, so the registry stays small however long the run.
	rep.Writes = closedLoop(ctx, o.stabilityClients, o.stabilityLoad, "writes", func(ctx context.Context, w, i int) error {
		r := rec{Type: "stability", Name: fmt.Sprintf("name-%03d", w), Alloc: fmt.Sprintf("w%03d-%d", w, i/2)}
		if i%2 == 0 {
			return ws.cs[w].register(ctx, r)
		}
		return ws.cs[w].deregister(ctx, r)
	})
	rep.LoadSeconds = time.Since(start).Seconds()
	phaseMu.Lock()
	phase = "idle"
	termAtIdle = rep.LastTerm
	phaseMu.Unlock()
	logf("stability: load done (%d writes, %d errors); idle for %s", rep.Writes.Ops, rep.Writes.Errors, o.stabilityIdle)
	select {
	case <-ctx.Done():
	case <-time.After(o.stabilityIdle):
	}
	stopPoll()
	wg.Wait()
	rep.IdleSeconds = time.Since(start).Seconds() - rep.LoadSeconds
	rep.TermsLoad = termAtIdle - rep.FirstTerm
	rep.TermsIdle = rep.LastTerm - termAtIdle
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("stability run interrupted: %w", err)
	}
	return rep, nil
}

func fmtChange(c leaderChange) string {
	return fmt.Sprintf("%7.1fs %-4s term %d leader %q (was %s)", c.AtSeconds, c.Phase, c.Term, c.Leader, c.Was)
}

func printStability(out io.Writer, r *stabilityReport) {
	fmt.Fprintf(out, "stability: %d writers for %.0f s, then idle for %.0f s (plugreg flags %v)\n", r.Clients, r.LoadSeconds, r.IdleSeconds, r.Flags)
	fmt.Fprintf(out, "  writes: %d (%.0f/s), errors %d, p50 %s ms, p99 %s ms, max %s ms\n",
		r.Writes.Ops, r.Writes.Throughput, r.Writes.Errors, f(r.Writes.P50, 1), f(r.Writes.P99, 1), f(r.Writes.Max, 1))
	fmt.Fprintf(out, "  terms: first %d, last %d; new terms under load %d, idle %d; %d polls of 3 nodes, %d failed\n",
		r.FirstTerm, r.LastTerm, r.TermsLoad, r.TermsIdle, r.Polls, r.PollErrors)
	for _, c := range r.Changes {
		fmt.Fprintf(out, "  %s\n", fmtChange(c))
	}
	if len(r.Changes) == 0 {
		fmt.Fprintln(out, "  no node saw its term or its leader change")
	}
}
