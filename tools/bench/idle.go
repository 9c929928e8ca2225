package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// idlePauser keeps only the system under measurement running
// (-pause-idle): the others' processes are stopped with SIGSTOP, so their
// heartbeats, timers and Go runtimes take nothing from the two cores a
// cell shares with the load generator. A nil idlePauser pauses nothing.
type idlePauser struct {
	systems []system
	paused  map[system]bool
	// terms holds each paused system's Raft term when it was paused, to
	// log an election the pause caused.
	terms map[system]uint64
}

// newIdlePauser returns nil when enabled is false.
func newIdlePauser(enabled bool, systems []system) *idlePauser {
	if !enabled {
		return nil
	}
	return &idlePauser{systems: systems, paused: map[system]bool{}, terms: map[system]uint64{}}
}

// resumeSettle is how long a resumed system must keep one leader in one
// term before its cell starts. The members' timers ran out while they
// were stopped and fire at once on SIGCONT: a plugreg follower may start
// an election, or its leader step down for want of a lease (500 ms), in
// the first moments; the elections of both systems end within their
// election timeouts (1 s each). Twice that leaves none for the cell.
const resumeSettle = 2 * time.Second

// focus leaves s alone running: it pauses every other system and, when s
// was paused, resumes it and waits until it is settled.
func (p *idlePauser) focus(ctx context.Context, s system) error {
	if p == nil {
		return nil
	}
	for _, o := range p.systems {
		if o == s || p.paused[o] {
			continue
		}
		p.terms[o] = leaderTerm(ctx, o)
		p.paused[o] = true // before pausing: resumeAll must reach a partial pause
		for _, pr := range o.procs() {
			if err := pr.pause(); err != nil {
				return fmt.Errorf("pause %s: %w", o.name(), err)
			}
		}
	}
	if !p.paused[s] {
		return nil
	}
	resumeSystem(s)
	delete(p.paused, s)
	if err := settle(ctx, s); err != nil {
		return err
	}
	if t := leaderTerm(ctx, s); t != p.terms[s] {
		logf("%s: resumed in term %d, paused in term %d: an election after the pause, before the cell", s.name(), t, p.terms[s])
	}
	return nil
}

// resumeAll continues every paused system (proc.stop does too, on every
// way out; this is for a run that goes on, such as the failover rounds).
func (p *idlePauser) resumeAll() {
	if p == nil {
		return
	}
	for s := range p.paused {
		resumeSystem(s)
		delete(p.paused, s)
	}
}

func resumeSystem(s system) {
	for _, pr := range s.procs() {
		pr.resume()
	}
}

// leaderTerm is the term the leader of s is in; 0 when it cannot say.
func leaderTerm(ctx context.Context, s system) uint64 {
	l, err := s.leader(ctx)
	if err != nil {
		return 0
	}
	t, _ := s.term(ctx, l)
	return t
}

// settle waits until s, resumed, has a leader that all members name, that
// acknowledges a write, and that still leads in the same term
// resumeSettle later.
func settle(ctx context.Context, s system) error {
	deadline := time.Now().Add(60 * time.Second)
	var lastErr error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		lastErr = steadyFor(ctx, s, time.Until(deadline))
		if lastErr == nil {
			return nil
		}
	}
	return fmt.Errorf("%s: no steady leader within 60s of resuming: %w", s.name(), errors.Join(lastErr, ctx.Err()))
}

// steadyFor is one attempt of settle, within timeout.
func steadyFor(ctx context.Context, s system, timeout time.Duration) error {
	if err := s.waitReady(ctx, timeout); err != nil {
		return err
	}
	l0, err := s.leader(ctx)
	if err != nil {
		return err
	}
	t0, err := s.term(ctx, l0)
	if err != nil {
		return err
	}
	if err := probeWrite(ctx, s, l0); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(resumeSettle):
	}
	l1, err := s.leader(ctx)
	if err != nil {
		return err
	}
	if t1, err := s.term(ctx, l1); err != nil || l1 != l0 || t1 != t0 {
		return fmt.Errorf("leader %d term %d became leader %d term %d (%v)", l0, t0, l1, t1, err)
	}
	return nil
}

// probeWrite writes one record through member i.
func probeWrite(ctx context.Context, s system, i int) error {
	w, err := s.writer(i)
	if err != nil {
		return err
	}
	defer w.close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.register(ctx, rec{Type: "warmup", Name: "resume", Alloc: "probe"}); err != nil {
		return fmt.Errorf("write after resume: %w", err)
	}
	return nil
}
