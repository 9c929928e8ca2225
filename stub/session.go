package stub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/api/pluginrpc"
)

// session is one connection to the agent.
type session struct {
	conn   *grpc.ClientConn
	stream pluginrpc.Plugins_SessionClient
	ctx    context.Context
	cancel context.CancelFunc
	sendMu sync.Mutex
}

func (c *session) send(m *pb.PluginMessage) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.Send(m)
}

func (c *session) close() {
	c.cancel()
	c.conn.Close()
}

// why is the error of a failed handshake: err, or, when the stub ended
// the handshake (its timeout, Start's ctx, Stop), that reason, which
// gRPC reports only as "context canceled".
func (c *session) why(err error) error {
	if cause := context.Cause(c.ctx); cause != nil && !errors.Is(cause, errClosed) {
		return cause
	}
	return err
}

var (
	// errClosed ends a session the stub closes.
	errClosed = errors.New("session closed")
	// errStopped ends what Stop interrupts.
	errStopped = errors.New("the stub was stopped")
)

// handshakeTimedOut is the error of a handshake the agent did not
// complete within timeout. It wraps context.DeadlineExceeded and names
// the option: a plugin that gave up first is otherwise a mystery
// (containerd/nri#292 saw "ttrpc: closed").
func handshakeTimedOut(timeout time.Duration) error {
	return fmt.Errorf("the agent did not complete the registration within %v (the registration timeout: WithRegistrationTimeout): %w", timeout, context.DeadlineExceeded)
}

// ErrConfigure wraps the error of the plugin's Configure: the stub stops.
var ErrConfigure = errors.New("plugin's Configure failed")

// permanent reports whether the agent would refuse err's session again.
func permanent(err error) bool {
	if errors.Is(err, ErrConfigure) {
		return true
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.FailedPrecondition, codes.PermissionDenied,
		codes.Unauthenticated, codes.Unimplemented:
		return true
	}
	return false
}

// open dials the agent and opens a session stream; the handshake is
// bounded by timeout and, when interruptible, ended by Stop or ctx.
func (s *Stub) open(ctx context.Context, timeout time.Duration, interruptible bool) (*session, func(), error) {
	conn, err := grpc.NewClient("passthrough:///plugreg-agent",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.dial(ctx, s.socketPath) }),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)), // a reset carries a whole type
	)
	if err != nil {
		return nil, nil, err
	}
	// What ended the handshake is its context's cause: gRPC says only
	// "context canceled" (see session.why).
	sctx, cancel := context.WithCancelCause(context.Background())
	c := &session{conn: conn, ctx: sctx, cancel: func() { cancel(errClosed) }}
	t := time.AfterFunc(timeout, func() { cancel(handshakeTimedOut(timeout)) })
	watch := make(chan struct{})
	if interruptible {
		go func() {
			select {
			case <-s.stopCh:
				cancel(errStopped)
			case <-ctx.Done():
				cancel(ctx.Err())
			case <-watch:
			}
		}()
	}
	endHandshake := func() {
		t.Stop()
		close(watch)
	}
	c.stream, err = pluginrpc.NewPluginsClient(conn).Session(sctx)
	if err != nil {
		err = c.why(err)
		endHandshake()
		c.close()
		return nil, nil, err
	}
	return c, endHandshake, nil
}

// connect opens a session and completes its handshake: Register,
// Configure (the plugin's handler), Subscribe, Ready.
func (s *Stub) connect(ctx context.Context) (*session, error) {
	c, endHandshake, err := s.open(ctx, s.handshakeTimeout(), true)
	if err != nil {
		return nil, s.explain(err)
	}
	fail := func(err error) (*session, error) {
		err = c.why(err)
		endHandshake()
		c.close()
		return nil, s.explain(err)
	}
	cfg, err := s.register(c)
	if err != nil {
		return fail(err)
	}
	mask, err := s.configure(cfg)
	if err != nil {
		return fail(err)
	}
	s.mu.Lock()
	s.mask = mask
	sub := &pb.Subscribe{Mask: uint32(mask), Types: s.types}
	known := s.resume || s.registered
	if known {
		from := s.cur.Complete
		sub.FromIndex = &from
	}
	s.mu.Unlock()
	if err := c.send(&pb.PluginMessage{Msg: &pb.PluginMessage_Subscribe{Subscribe: sub}}); err != nil {
		return fail(err)
	}
	m, err := c.stream.Recv()
	if err != nil {
		return fail(err)
	}
	ready := m.GetReady()
	if ready == nil {
		return fail(fmt.Errorf("protocol: expected Ready, got %T", m.GetMsg()))
	}
	endHandshake()
	s.mu.Lock()
	s.registered = true
	if !known {
		s.cur = api.Cursor{Complete: ready.GetStartIndex()}
	} else {
		s.cur = s.cur.Resumed(ready.GetStartIndex()) // a rewound cluster's stream
	}
	s.mu.Unlock()
	if ready.GetPending() != "" {
		s.logger.Warn("registered with the agent; the registry write is pending (the agent retries)", "reason", ready.GetPending())
	} else {
		s.logger.Debug("registered", "index", ready.GetIndex(), "reclaimed", cfg.Reclaimed, "events_after", ready.GetStartIndex())
	}
	return c, nil
}

// register sends Register and returns the agent's Configure.
func (s *Stub) register(c *session) (Config, error) {
	s.mu.Lock()
	reg := &pb.Register{
		Type: s.typ, Name: s.name, Idx: s.idx, Version: s.version, Options: s.options, SessionToken: s.token,
		Endpoint: &pb.Endpoint{SocketPath: s.endpoint.SocketPath, Address: s.endpoint.Address},
	}
	s.mu.Unlock()
	if err := c.send(&pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: reg}}); err != nil {
		return Config{}, err
	}
	m, err := c.stream.Recv()
	if err != nil {
		return Config{}, err
	}
	pc := m.GetConfigure()
	if pc == nil {
		return Config{}, fmt.Errorf("protocol: expected Configure, got %T", m.GetMsg())
	}
	cfg := Config{
		NodeID: pc.GetNodeId(), Config: pc.GetConfig(), AllocID: pc.GetAllocId(), Reclaimed: pc.GetReclaimed(),
		RegistrationTimeout: time.Duration(pc.GetRegistrationTimeoutMs()) * time.Millisecond,
		RequestTimeout:      time.Duration(pc.GetRequestTimeoutMs()) * time.Millisecond,
	}
	if cfg.RegistrationTimeout <= 0 {
		cfg.RegistrationTimeout = defaultRegistrationTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = defaultRequestTimeout
	}
	s.mu.Lock()
	s.token, s.agent = pc.GetSessionToken(), cfg
	s.mu.Unlock()
	return cfg, nil
}

// configure calls the plugin's Configure, if it has one, and returns the
// event mask to subscribe with.
func (s *Stub) configure(cfg Config) (mask EventMask, err error) {
	h, ok := s.plugin.(ConfigureInterface)
	if !ok {
		return s.mask, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			mask, err = 0, fmt.Errorf("%w: panic: %v", ErrConfigure, r)
		}
	}()
	m, err := h.Configure(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrConfigure, err)
	}
	if m == 0 {
		m = s.mask
	}
	return m, nil
}

// deregister is Stop for a stub without a session: Register with its
// token (reclaiming the registration), then Stop.
func (s *Stub) deregister(ctx context.Context) error {
	c, endHandshake, err := s.open(ctx, s.RequestTimeout(), false)
	if err != nil {
		return s.explain(err)
	}
	defer endHandshake()
	defer c.close()
	if _, err := s.register(c); err != nil {
		return s.explain(err)
	}
	if err := c.send(&pb.PluginMessage{Msg: &pb.PluginMessage_Stop{Stop: &pb.Stop{}}}); err != nil {
		return err
	}
	if _, err := c.stream.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}

// serve delivers one session's events until it ends; after Stop it says
// Stop and waits (for the request timeout) for the agent to end it.
func (s *Stub) serve(c *session) error {
	defer c.close()
	watch := make(chan struct{})
	defer close(watch)
	go func() {
		select {
		case <-s.stopCh:
			if err := c.send(&pb.PluginMessage{Msg: &pb.PluginMessage_Stop{Stop: &pb.Stop{}}}); err != nil {
				c.cancel()
				return
			}
			t := time.AfterFunc(s.RequestTimeout(), c.cancel)
			<-watch
			t.Stop()
		case <-watch:
		}
	}()
	var stalled atomic.Bool
	stall := time.AfterFunc(stallTimeout, func() { stalled.Store(true); c.cancel() })
	defer stall.Stop()
	s.mu.Lock()
	skip := s.cur.Skip()
	s.mu.Unlock()
	for {
		stall.Reset(stallTimeout)
		m, err := c.stream.Recv()
		if !stall.Stop() && stalled.Load() {
			return fmt.Errorf("no event or heartbeat from the agent for %v", stallTimeout)
		}
		if errors.Is(err, io.EOF) { // the agent ended the session with OK: after our Stop
			s.mu.Lock()
			s.registered = false
			s.mu.Unlock()
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case m.GetShutdown() != nil:
			s.logger.Info("the agent is stopping", "reason", m.GetShutdown().GetReason())
			if !s.stopping() {
				s.enqueue(c, item{})
			}
		case m.GetEvent() != nil:
			ev := m.GetEvent().API()
			s.mu.Lock()
			next, isNew, err := s.cur.Next(ev, &skip)
			s.mu.Unlock()
			if err != nil {
				return err
			}
			if isNew && s.wants(ev) && !s.enqueue(c, item{ev: ev}) {
				continue // not handed over: the cursor stays
			}
			s.mu.Lock()
			s.cur = next
			s.mu.Unlock()
		default:
			return fmt.Errorf("protocol: unexpected %T after Ready", m.GetMsg())
		}
	}
}

// enqueue hands it to the handler goroutine; false if the session ended
// or the stub is stopping first.
func (s *Stub) enqueue(c *session, it item) bool {
	select {
	case s.queue <- it:
		return true
	case <-c.ctx.Done():
	case <-s.stopCh:
	}
	return false
}

// wants reports whether the plugin's handlers get ev.
func (s *Stub) wants(ev *api.Event) bool {
	if ev.EventType == api.EventHeartbeat {
		return false
	}
	if ev.EventType == api.EventReset {
		return s.mask&Reset != 0
	}
	if _, ok := pb.MaskedKind(uint32(s.mask), pb.KindOf(ev.EventType)); !ok || ev.EventType == "" {
		return false // not asked for, or a kind this SDK does not know
	}
	return len(s.types) == 0 || ev.Info == nil || slices.Contains(s.types, ev.Info.Type)
}

// explain turns a connection failure into an error that says what to do.
func (s *Stub) explain(err error) error {
	if !s.customDialer {
		if _, serr := os.Stat(s.socketPath); errors.Is(serr, os.ErrNotExist) {
			return fmt.Errorf("stub %s/%s: no plugin socket at %s (is the plugreg agent running? its socket is -plugin-socket; tell the stub with %s or WithSocketPath): %w",
				s.typ, s.name, s.socketPath, SocketPathEnv, err)
		}
	}
	return fmt.Errorf("stub %s/%s: session with the agent at %s: %w", s.typ, s.name, s.socketPath, err)
}
