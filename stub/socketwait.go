package stub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"
)

const (
	// maxSocketPoll is the longest wait between two looks at a socket
	// that is not there yet: a plugin waiting at boot registers within
	// about a second of its agent's start. A look is one failed dial, so
	// the wait costs nothing worth a file watch (which would also need
	// to follow directories that do not exist yet, and another
	// dependency in every plugin).
	maxSocketPoll = time.Second
	// socketProbeTimeout bounds one look: a unix socket answers a dial at
	// once; a dialer given with WithDialer may not.
	socketProbeTimeout = 5 * time.Second
)

// socketPoll is the wait before look n+1 at the socket: 50ms doubling to
// maxSocketPoll, jittered so that plugins started together at boot do not
// look in step.
func socketPoll(n int) time.Duration {
	return jittered(min(50*time.Millisecond<<min(n, 5), maxSocketPoll))
}

// awaitSocket waits until the agent's socket accepts a connection
// (WithWaitForSocket), for at most socketWaitLimit (zero: no limit), and
// until ctx ends or Stop.
func (s *Stub) awaitSocket(ctx context.Context) error {
	wctx, cancel := s.socketWaitContext(ctx)
	defer cancel()
	began := time.Now()
	for look := 0; ; look++ {
		err := s.probeSocket(wctx)
		if err != nil && wctx.Err() != nil { // a probe cut by the wait's end says nothing
			return s.socketWaitEnded(ctx, err, time.Since(began))
		}
		if !socketAbsent(err) {
			if look > 0 {
				s.logger.Info("the agent's plugin socket is there", "path", s.socketPath, "waited", time.Since(began).Round(time.Millisecond))
			}
			return nil // connected, or a failure for the registration to retry and report
		}
		if look == 0 {
			s.logSocketWait(err, s.socketWaitLimit)
		} else {
			s.logger.Debug("the agent's plugin socket is not there yet", "path", s.socketPath, "look", look+1, "error", err)
		}
		if !s.sleep(wctx, socketPoll(look)) {
			return s.socketWaitEnded(ctx, err, time.Since(began))
		}
	}
}

// logSocketWait says, at the first look that finds no agent at the socket
// (err), that the stub waits for it: where, for how long (zero: until Start's
// ctx ends or Stop), and how to point it elsewhere. Without it a plugin
// started before its agent, or told the wrong path, is silent until the
// wait ends (15 s by default, or never with WithWaitForSocket(0)).
func (s *Stub) logSocketWait(err error, wait time.Duration) {
	limit := "until stopped"
	if wait > 0 {
		limit = wait.Round(time.Second).String()
	}
	s.logger.Info("waiting for the agent's plugin socket", "path", s.socketPath, "wait", limit,
		"hint", "is the plugreg agent running? its socket is -plugin-socket; point the plugin at another with "+SocketPathEnv+"=PATH or WithSocketPath",
		"error", err)
}

// socketWaitContext is ctx, ended after socketWaitLimit when there is one.
func (s *Stub) socketWaitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.socketWaitLimit == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.socketWaitLimit)
}

// probeSocket dials the agent's socket once and hangs up: nil when
// something accepted the connection.
func (s *Stub) probeSocket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, socketProbeTimeout)
	defer cancel()
	conn, err := s.dial(ctx, s.socketPath)
	if err != nil {
		return err
	}
	conn.Close() // the connect was the question
	return nil
}

// socketAbsent reports whether a dial failed because no agent listens on
// the socket yet: there is no socket (or no directory for it), or the
// socket a stopped agent left behind refuses connections.
func socketAbsent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED)
}

// socketWaitEnded is the error of a wait for the socket that ended before
// the socket was there (last is the last look's failure): it wraps ctx's
// error, errStopped, or context.DeadlineExceeded when the limit passed.
func (s *Stub) socketWaitEnded(ctx context.Context, last error, waited time.Duration) error {
	prefix := fmt.Sprintf("stub %s/%s: waiting for the agent's plugin socket at %s", s.typ, s.name, s.socketPath)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w (after %v; last look: %v)", prefix, ctx.Err(), waited.Round(time.Millisecond), last)
	case s.stopping():
		return fmt.Errorf("%s: %w (last look: %v)", prefix, errStopped, last)
	default:
		return fmt.Errorf("%s: not there after %v (WithWaitForSocket; is the plugreg agent running? its socket is -plugin-socket; tell the stub with %s or WithSocketPath): %w (last look: %v)",
			prefix, s.socketWaitLimit, SocketPathEnv, context.DeadlineExceeded, last)
	}
}
