package stub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
)

// Defaults.
const (
	// DefaultSocketPath is where the stub looks for its agent's plugin
	// socket when neither WithSocketPath nor PLUGREG_PLUGIN_SOCKET says:
	// the socket of an agent with -data-dir /var/lib/plugreg.
	DefaultSocketPath = "/var/lib/plugreg/plugin.sock"
	// SocketPathEnv names the environment variable with the socket's path.
	SocketPathEnv = "PLUGREG_PLUGIN_SOCKET"

	// Until the agent says otherwise (Configure), these bound the first
	// registration and Stop's deregistration. WithRegistrationTimeout
	// replaces the first for good.
	defaultRegistrationTimeout = 5 * time.Second
	defaultRequestTimeout      = 10 * time.Second
	// stallTimeout: a session silent this long (the agent sends a heartbeat
	// every few seconds) is abandoned for a new one. It measures only the
	// agent's silence, never the time a slow handler takes.
	stallTimeout = 30 * time.Second
	// maxBackoff between reconnect attempts: the agent counts on it (a
	// restarted agent waits that long for its plugins to come back).
	maxBackoff = pb.MaxReconnectBackoff
	queueSize  = 128
)

// Option configures a Stub.
type Option func(*Stub) error

// WithPluginName sets the plugin's name (default: the executable's name,
// without an "NN-" idx prefix).
func WithPluginName(name string) Option {
	return func(s *Stub) error { s.name = name; return nil }
}

// WithPluginIdx sets the plugin's idx, two digits (default: the
// executable's "NN-" prefix, else "00"). Two instances of one plugin on a
// host need different idx.
func WithPluginIdx(idx string) Option {
	return func(s *Stub) error { s.idx = idx; return nil }
}

// WithPluginType sets the plugin's type (required).
func WithPluginType(t string) Option {
	return func(s *Stub) error { s.typ = t; return nil }
}

// WithVersion sets the version registered for the plugin.
func WithVersion(v string) Option {
	return func(s *Stub) error { s.version = v; return nil }
}

// WithEndpoint sets how the plugin is reached (required): an absolute
// path or unix://PATH is a socket path, anything else an address.
func WithEndpoint(endpoint string) Option {
	return func(s *Stub) error {
		switch {
		case strings.HasPrefix(endpoint, "unix://"):
			s.endpoint = api.ConnectionInfo{SocketPath: strings.TrimPrefix(endpoint, "unix://")}
		case strings.HasPrefix(endpoint, "/"):
			s.endpoint = api.ConnectionInfo{SocketPath: endpoint}
		default:
			s.endpoint = api.ConnectionInfo{Address: endpoint}
		}
		return nil
	}
}

// WithOptions sets options registered with the plugin (keys starting
// "plugreg." are reserved).
func WithOptions(opts map[string]string) Option {
	return func(s *Stub) error {
		s.options = make(map[string]string, len(opts))
		for k, v := range opts {
			s.options[k] = v
		}
		return nil
	}
}

// WithSocketPath sets the agent's plugin socket (default: $PLUGREG_PLUGIN_SOCKET,
// then DefaultSocketPath).
func WithSocketPath(path string) Option {
	return func(s *Stub) error { s.socketPath = path; return nil }
}

// WithDialer replaces how the stub connects to the socket.
func WithDialer(dial func(ctx context.Context, socketPath string) (net.Conn, error)) Option {
	return func(s *Stub) error { s.dial = dial; s.customDialer = true; return nil }
}

// WithOnClose sets a function called whenever the connection to the agent
// goes down (the stub then reconnects, unless stopped or told not to).
func WithOnClose(onClose func()) Option {
	return func(s *Stub) error { s.onClose = onClose; return nil }
}

// WithEventMask sets the events the plugin receives, for the given plugin
// types (none: every type), instead of the mask derived from the handler
// interfaces it implements.
func WithEventMask(mask EventMask, types ...string) Option {
	return func(s *Stub) error {
		s.mask, s.maskSet, s.types = mask, true, append([]string(nil), types...)
		return nil
	}
}

// WithResumeIndex starts the events after index instead of at the
// agent's current position.
func WithResumeIndex(index uint64) Option {
	return WithResumeFrom(api.Cursor{Complete: index})
}

// WithResumeFrom starts the events exactly after a position an earlier
// stub reported (Position): none is delivered twice, none is skipped.
func WithResumeFrom(c api.Cursor) Option {
	return func(s *Stub) error { s.cur = c; s.resume = true; return nil }
}

// WithoutReconnect makes the stub end (Run returns, OnClose is called)
// when its connection to the agent goes down, as NRI's stub does.
func WithoutReconnect() Option {
	return func(s *Stub) error { s.noReconnect = true; return nil }
}

// WithRegistrationTimeout sets how long the stub waits for the agent to
// register the plugin: Start retries (an agent still starting, a socket
// not there yet) until d has passed, and each handshake, Start's and every
// reconnect's, is given up when the agent has not completed it within d.
// Start's error then wraps context.DeadlineExceeded.
//
// It bounds the plugin's own wait, and wins over the agent's: without it
// the stub waits the agent's registration timeout plus its request
// timeout (15s until the agent says them in Configure), because an agent
// whose registry is slow answers a registration only after its request
// timeout (10s by default; the write is then left pending). A d below
// that may give up on an agent about to answer (containerd/nri#292: a
// plugin's fixed 5s lost that race at boot).
func WithRegistrationTimeout(d time.Duration) Option {
	return func(s *Stub) error {
		if d <= 0 {
			return fmt.Errorf("stub: %w: registration timeout %v (WithRegistrationTimeout) is not positive", api.ErrInvalid, d)
		}
		s.registrationTimeout = d
		return nil
	}
}

// WithWaitForSocket makes Start wait for the agent's plugin socket while
// it is missing or refuses connections (the agent has not started yet: a
// plugin started at boot before its agent), instead of failing after the
// registration timeout. Start looks at the socket with jittered backoff,
// up to a second apart, for at most limit (zero: until Start's ctx ends
// or Stop), then registers within the registration timeout as without
// this option. Start's error wraps ctx's error when ctx ended the wait,
// context.DeadlineExceeded when limit did.
//
// The socket is missing when a dial fails with an error that wraps
// fs.ErrNotExist, and refuses connections when it wraps
// syscall.ECONNREFUSED, as net.Dialer's errors do; a dialer given with
// WithDialer must keep them for the wait to see them. Any other failure
// is the registration's to retry and report.
func WithWaitForSocket(limit time.Duration) Option {
	return func(s *Stub) error {
		if limit < 0 {
			return fmt.Errorf("stub: %w: socket wait %v (WithWaitForSocket) is negative", api.ErrInvalid, limit)
		}
		s.waitForSocket, s.socketWaitLimit = true, limit
		return nil
	}
}

// WithLogger sets the stub's logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(s *Stub) error { s.logger = l; return nil }
}

// Stub connects a plugin to its host's agent. Create it with New.
type Stub struct {
	plugin                  any
	typ, name, idx, version string
	endpoint                api.ConnectionInfo
	options                 map[string]string
	socketPath              string
	dial                    func(ctx context.Context, socketPath string) (net.Conn, error)
	customDialer            bool
	onClose                 func()
	mask                    EventMask
	maskSet                 bool
	types                   []string
	resume                  bool
	noReconnect             bool
	logger                  *slog.Logger
	// registrationTimeout is WithRegistrationTimeout's (zero: not set).
	registrationTimeout time.Duration
	// waitForSocket and socketWaitLimit are WithWaitForSocket's.
	waitForSocket   bool
	socketWaitLimit time.Duration

	started  atomic.Bool
	stopCh   chan struct{} // closed by Stop
	stopOnce sync.Once
	done     chan struct{} // closed when the stub has stopped for good
	quit     chan struct{} // tells the handler goroutine to end
	handled  chan struct{} // closed when the handler goroutine ended
	queue    chan item

	mu         sync.Mutex // guards the fields below
	token      string
	cur        api.Cursor
	agent      Config // from the last Configure
	registered bool   // the agent has held a registration for it
	err        error  // why it stopped, if not by Stop
}

// item is one thing for the handler goroutine: an event, or the agent's
// shutdown notice (ev nil).
type item struct{ ev *api.Event }

// New returns a Stub for plugin, which implements any of the handler
// interfaces (ConfigureInterface, RegisteredInterface, ...).
func New(plugin any, opts ...Option) (*Stub, error) {
	s := &Stub{
		plugin: plugin, socketPath: os.Getenv(SocketPathEnv),
		stopCh: make(chan struct{}), done: make(chan struct{}), quit: make(chan struct{}), handled: make(chan struct{}),
		queue: make(chan item, queueSize),
		agent: Config{RegistrationTimeout: defaultRegistrationTimeout, RequestTimeout: defaultRequestTimeout},
	}
	s.name, s.idx = nameFromExecutable()
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.socketPath == "" {
		s.socketPath = DefaultSocketPath
	}
	if s.dial == nil {
		s.dial = func(ctx context.Context, path string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	if !s.maskSet {
		s.mask = derivedMask(plugin)
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.logger = s.logger.With("plugin", s.typ+"/"+s.name, "idx", s.idx)
	// The agent checks everything again; saying it here is clearer.
	for _, f := range []struct{ field, v string }{{"type (WithPluginType)", s.typ}, {"name (WithPluginName)", s.name}} {
		if err := api.ValidateIdentifier(f.field, f.v); err != nil {
			return nil, fmt.Errorf("stub: %w", err)
		}
	}
	if !pb.ValidIdx(s.idx) {
		return nil, fmt.Errorf("stub: %w: idx %q (WithPluginIdx) is not two digits", api.ErrInvalid, s.idx)
	}
	if s.endpoint.SocketPath == "" && s.endpoint.Address == "" {
		return nil, fmt.Errorf("stub: %w: no endpoint (WithEndpoint): how is the plugin reached?", api.ErrInvalid)
	}
	for _, t := range s.types {
		if err := api.ValidateIdentifier("event type", t); err != nil {
			return nil, fmt.Errorf("stub: %w", err)
		}
	}
	return s, nil
}

// nameFromExecutable is NRI's convention: an executable named NN-name is
// plugin name with idx NN.
func nameFromExecutable() (name, idx string) {
	base := filepath.Base(os.Args[0])
	if len(base) > 3 && pb.ValidIdx(base[:2]) && base[2] == '-' {
		return base[3:], base[:2]
	}
	return base, "00"
}

// RegistrationTimeout is the agent's registration timeout (5s until the
// agent said): how long the agent waits for the plugin. The stub's own
// wait is handshakeTimeout.
func (s *Stub) RegistrationTimeout() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agent.RegistrationTimeout
}

// handshakeTimeout is how long the stub waits for the agent to complete a
// handshake: WithRegistrationTimeout's (the plugin's choice wins), else
// the agent's registration timeout plus its request timeout, as last
// heard (5s + 10s before the agent said). A handshake waits for both: the
// agent's own steps, then its write to the registry, which it answers
// within the request timeout even when the cluster is electing a leader.
// Waiting only the first lost that race at boot (containerd/nri#292).
func (s *Stub) handshakeTimeout() time.Duration {
	if s.registrationTimeout > 0 {
		return s.registrationTimeout
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agent.RegistrationTimeout + s.agent.RequestTimeout
}

// RequestTimeout is the agent's request timeout: the time the plugin's
// handlers are expected to take, and the bound on Stop's deregistration.
func (s *Stub) RequestTimeout() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agent.RequestTimeout
}

// Position is what has been handed to the plugin's handlers: every event
// up to Complete, and the first PartialCount of index Partial (an index
// whose events are not known to be all in yet). A later process started
// WithResumeFrom(Position()) continues exactly there.
func (s *Stub) Position() api.Cursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Run is Start, then Wait. It returns nil when ctx ends or Stop is called
// (the plugin is then deregistered), or why the stub stopped otherwise.
func (s *Stub) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, s.Stop)
	defer stop()
	return s.Wait()
}

// Start connects to the agent and registers the plugin, retrying with
// backoff for the registration timeout (WithRegistrationTimeout, default
// 5s: an agent still starting, a socket not there yet); errors the agent
// would repeat (invalid fields, a plugin of this identity already
// connected, a Configure that failed) end it at once. ctx bounds only
// this, and its end is in Start's error (errors.Is(err, ctx.Err())):
// Start returns when the plugin is registered, and the stub then keeps it
// registered, reconnecting when needed, until Stop (Run stops it when its
// ctx ends).
func (s *Stub) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("stub: already started")
	}
	sess, err := s.firstSession(ctx)
	if err != nil {
		s.finish(err)
		return err
	}
	go s.handle()
	go s.run(sess)
	return nil
}

// firstSession is Start's connection: after the wait for the socket, if
// asked for, the attempts within the registration timeout.
func (s *Stub) firstSession(ctx context.Context) (*session, error) {
	if s.waitForSocket {
		if err := s.awaitSocket(ctx); err != nil {
			return nil, err
		}
	}
	return s.connectRetrying(ctx, time.Now().Add(s.handshakeTimeout()))
}

// Stop deregisters the plugin (an orderly stop: at once, not after the
// agent's grace period) and ends the stub. It waits for the agent's
// answer for at most RequestTimeout, and for a running handler as long.
// Idempotent.
func (s *Stub) Stop() {
	s.stopOnce.Do(func() { close(s.stopCh) })
	if s.started.Load() {
		<-s.done
	}
}

// Wait waits until the stub has stopped, and returns why: nil after Stop
// (or the end of Run's ctx), an error when it could not stay registered
// (WithoutReconnect, or a refusal by the agent).
func (s *Stub) Wait() error {
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// finish records why the stub stopped and releases Wait.
func (s *Stub) finish(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	close(s.done)
}

func (s *Stub) stopping() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// sleep waits d; false if the stub is stopped or ctx ends first.
func (s *Stub) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stopCh:
	case <-ctx.Done():
	}
	return false
}

// backoff is the wait before reconnect attempt n: 100ms doubling to 5s,
// jittered so that the plugins of a restarted agent do not come back in
// step.
func backoff(n int) time.Duration {
	return jittered(min(100*time.Millisecond<<min(n, 6), maxBackoff))
}

// jittered is a random duration between d/2 and d.
func jittered(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// run serves sessions until the stub stops: it reconnects when one ends.
func (s *Stub) run(sess *session) {
	var why error
	for {
		err := s.serve(sess)
		if s.stopping() {
			break
		}
		s.logger.Warn("connection to the agent lost", "error", err)
		if s.onClose != nil {
			s.onClose()
		}
		if s.noReconnect || permanent(err) {
			why = err
			break
		}
		if sess, why = s.connectRetrying(context.Background(), time.Time{}); sess == nil {
			break // stopped (why is then dropped below), or refused for good
		}
	}
	if s.stopping() {
		why = nil
		s.stopDisconnected()
	}
	close(s.quit)
	select { // a handler stuck past the request timeout is left behind
	case <-s.handled:
	case <-time.After(s.RequestTimeout()):
		s.logger.Warn("a handler is still running after the request timeout; not waiting for it")
	}
	s.finish(why)
}

// connectRetrying connects, retrying with backoff, until it succeeds,
// the agent refuses for good, ctx ends, the stub is stopped, or (when not
// zero) deadline has passed.
func (s *Stub) connectRetrying(ctx context.Context, deadline time.Time) (*session, error) {
	for attempt := 0; ; attempt++ {
		sess, err := s.connect(ctx)
		if err == nil {
			if attempt > 0 {
				s.logger.Info("connected to the agent", "attempts", attempt+1)
			}
			return sess, nil
		}
		if ctx.Err() != nil {
			return nil, s.interrupted(ctx, err)
		}
		if permanent(err) || (!deadline.IsZero() && time.Now().After(deadline)) {
			return nil, err
		}
		if attempt == 0 {
			// gRPC's error does not say whether the socket is there: a
			// look does, and then the wait is worth a line at once.
			if lookErr := s.probeSocket(ctx); socketAbsent(lookErr) {
				var wait time.Duration
				if !deadline.IsZero() {
					wait = time.Until(deadline)
				}
				s.logSocketWait(lookErr, wait)
			}
		}
		s.logger.Debug("connecting to the agent failed; retrying", "attempt", attempt+1, "error", err)
		if !s.sleep(ctx, backoff(attempt)) {
			return nil, s.interrupted(ctx, err)
		}
	}
}

// interrupted is the error of attempts that ctx's end or Stop ended
// (err is the last attempt's): it wraps ctx's error or errStopped, which
// a caller of Start tests for (a long WithRegistrationTimeout is ended
// by ctx).
func (s *Stub) interrupted(ctx context.Context, err error) error {
	why := ctx.Err()
	if why == nil {
		why = errStopped
	}
	if errors.Is(err, why) {
		return err
	}
	return fmt.Errorf("stub %s/%s: connecting to the agent at %s: %w (last attempt: %v)", s.typ, s.name, s.socketPath, why, err)
}

// stopDisconnected deregisters a plugin that is stopped while it has no
// session: it connects once more, reclaims its registration and says Stop.
// If the agent cannot be reached within the request timeout, the agent's
// grace period removes the registration instead.
func (s *Stub) stopDisconnected() {
	s.mu.Lock()
	registered := s.registered
	s.mu.Unlock()
	if !registered {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.RequestTimeout())
	defer cancel()
	if err := s.deregister(ctx); err != nil {
		s.logger.Warn("could not deregister on stop; the agent removes the plugin after its grace period", "error", err)
	}
}

// handle runs the plugin's handlers, one item at a time, until quit.
func (s *Stub) handle() {
	defer close(s.handled)
	for {
		select {
		case <-s.quit:
			return
		case it := <-s.queue:
			s.call(it)
		}
	}
}

// call runs one handler with the request timeout as its context's
// deadline; a panic is recovered and logged, an error logged.
func (s *Stub) call(it item) {
	ctx, cancel := context.WithTimeout(context.Background(), s.RequestTimeout())
	defer cancel()
	start := time.Now()
	what, err := s.dispatch(ctx, it)
	if took := time.Since(start); took > s.RequestTimeout() {
		s.logger.Warn("handler slower than the request timeout", "handler", what, "took", took)
	}
	if err != nil {
		s.logger.Error("handler failed", "handler", what, "error", err)
	}
}

func (s *Stub) dispatch(ctx context.Context, it item) (what string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if it.ev == nil {
		what = "Shutdown"
		if h, ok := s.plugin.(ShutdownInterface); ok {
			h.Shutdown(ctx)
		}
		return what, nil
	}
	ev := it.ev
	switch ev.EventType {
	case api.EventRegistered:
		what = "Registered"
		if h, ok := s.plugin.(RegisteredInterface); ok {
			err = h.Registered(ctx, ev)
		}
	case api.EventUpdated:
		what = "Updated"
		if h, ok := s.plugin.(UpdatedInterface); ok {
			err = h.Updated(ctx, ev)
		}
	case api.EventDeregistered:
		what = "Deregistered"
		if h, ok := s.plugin.(DeregisteredInterface); ok {
			err = h.Deregistered(ctx, ev)
		}
	case api.EventExpired:
		// The instance is gone all the same: a plugin that handles
		// only deregistrations is told there.
		what = "Expired"
		if h, ok := s.plugin.(ExpiredInterface); ok {
			err = h.Expired(ctx, ev)
		} else if h, ok := s.plugin.(DeregisteredInterface); ok {
			what = "Deregistered"
			err = h.Deregistered(ctx, ev)
		}
	case api.EventHealth:
		// The instance is still there, changed: a plugin that handles
		// only updates is told there.
		what = "Health"
		if h, ok := s.plugin.(HealthInterface); ok {
			err = h.Health(ctx, ev)
		} else if h, ok := s.plugin.(UpdatedInterface); ok {
			what = "Updated"
			err = h.Updated(ctx, ev)
		}
	case api.EventReset:
		what = "Reset"
		if h, ok := s.plugin.(ResetInterface); ok {
			err = h.Reset(ctx, ev)
		}
	}
	return what, err
}
