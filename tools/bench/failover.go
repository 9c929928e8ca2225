package main

import (
	"context"
	"fmt"
	"time"
)

// pinnedWriter is a writer that talks to node i only: during a failover
// the bench writes through every surviving node at once, so the figure is
// the cluster's recovery, not a client's choice of node.
type pinnedWriterer interface {
	pinnedWriter(i int) (writer, error)
}

func (s *etcdSystem) pinnedWriter(i int) (writer, error) { return s.writer(i) }

// failoverRound kills the leader with SIGKILL and returns the time from
// the kill to the first acknowledged write, then restarts the killed node
// and waits until the cluster is healthy again.
func failoverRound(ctx context.Context, s system, round int) (time.Duration, error) {
	l, err := s.leader(ctx)
	if err != nil {
		return 0, err
	}
	var ws []writer
	defer func() {
		for _, w := range ws {
			w.close()
		}
	}()
	for i := 0; i < members; i++ {
		if i == l {
			continue
		}
		w, err := s.(pinnedWriterer).pinnedWriter(i)
		if err != nil {
			return 0, err
		}
		// Warm the connection so that the figure holds no dial.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = w.register(wctx, rec{Type: "failover", Name: "warm", Alloc: fmt.Sprintf("r%d-n%d", round, i)})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("%s: warm-up write on node %d: %w", s.name(), i, err)
		}
		ws = append(ws, w)
	}

	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	got := make(chan time.Duration, len(ws))
	t0 := time.Now()
	s.kill(l)
	for k, w := range ws {
		go func() {
			for attempt := 0; rctx.Err() == nil; attempt++ {
				actx, acancel := context.WithTimeout(rctx, 2*time.Second)
				err := w.register(actx, rec{Type: "failover", Name: "probe", Alloc: fmt.Sprintf("r%d-w%d-%d", round, k, attempt)})
				acancel()
				if err == nil {
					got <- time.Since(t0)
					return
				}
				select {
				case <-rctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
	var d time.Duration
	select {
	case d = <-got:
		cancel() // stop the other writers
	case <-rctx.Done():
		err = fmt.Errorf("%s: no write acknowledged within 60s of killing the leader", s.name())
	}
	if rerr := s.restart(l); rerr != nil {
		return 0, rerr
	}
	if werr := s.waitReady(ctx, 60*time.Second); werr != nil {
		return 0, fmt.Errorf("%s: after restarting node %d: %w", s.name(), l, werr)
	}
	return d, err
}
