package stub_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/stub"
)

// TestRegistrationTimeout: WithRegistrationTimeout bounds the stub's wait
// for an agent slow to answer (its registry writes held back: a slow
// cluster at boot), both ways. Shorter than the agent's answer, Start fails
// with a timeout error where the default would have waited for the
// agent's answer; longer, Start waits for it and registers, and so does
// the default (15s).
func TestRegistrationTimeout(t *testing.T) {
	e := newEnvWithoutAgent(t, 10*time.Second)
	start := func(name string, timeout time.Duration) error {
		s, err := stub.New(&recorder{}, quiet, stub.WithSocketPath(e.path), stub.WithPluginType("demo"), stub.WithPluginName(name),
			stub.WithEndpoint("/run/"+name+".sock"), stub.WithRegistrationTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s.Start(context.Background())
	}

	// Shorter: the agent answers after 3s, the stub waits 1s.
	e.registryDelay = 3 * time.Second
	e.startAgent()
	err := start("quick", time.Second)
	if err == nil {
		t.Fatal("registered with an agent slower than the registration timeout")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "WithRegistrationTimeout") {
		t.Fatalf("Start: %v; want a timeout error that names WithRegistrationTimeout", err)
	}
	t.Logf("Start with an agent slower than the registration timeout: %v", err)

	// Longer: the agent answers after 7s, the stub waits a minute.
	e.svc.Stop()
	e.registryDelay = 7 * time.Second
	e.startAgent()
	if err := start("patient", time.Minute); err != nil {
		t.Fatalf("Start with a registration timeout longer than the agent's answer: %v", err)
	}
	e.c.Eventually(20*time.Second, "registered on every server", func() bool { return e.listedEverywhere("demo", "patient", 1) })

	// The default: the agent's registration and request timeouts
	// together (15s), above an agent that answers after 7s. A stub that
	// waited only the registration timeout (5s) gave up here.
	s, err := stub.New(&recorder{}, quiet, stub.WithSocketPath(e.path), stub.WithPluginType("demo"), stub.WithPluginName("default"),
		stub.WithEndpoint("/run/default.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start with the default registration timeout and an agent that answers after 7s: %v", err)
	}
}

// retriesOver is how long after Start a stub without WithWaitForSocket
// and with a 5s registration timeout has given up on a missing socket for
// certain: the timeout, then at most one backoff (at most 5s) until the
// attempt that finds it passed.
const retriesOver = 11 * time.Second

// TestWaitForSocket: a stub started WithWaitForSocket before its agent
// waits for the agent's plugin socket longer than it would retry without
// the option, and registers once the agent has started.
func TestWaitForSocket(t *testing.T) {
	e := newEnvWithoutAgent(t, 10*time.Second)
	seen := e.observe("demo", "early")
	looks := &dialTimes{}
	s, err := stub.New(&recorder{}, quiet, stub.WithSocketPath(e.path), stub.WithPluginType("demo"), stub.WithPluginName("early"),
		stub.WithEndpoint("/run/early.sock"), stub.WithDialer(looks.dial), stub.WithWaitForSocket(0),
		stub.WithRegistrationTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	started := make(chan error, 1)
	go func() { started <- s.Start(context.Background()) }()

	time.Sleep(retriesOver)
	select {
	case err := <-started:
		t.Fatalf("Start returned before the agent had started: %v", err)
	default:
	}
	if n := looks.count(); n < 2 {
		t.Fatalf("the stub looked at the socket %d times while it waited", n)
	}
	e.startAgent()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start once the agent had started: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Start still waiting a minute after the agent's start")
	}
	e.c.Eventually(20*time.Second, "registered on every server", func() bool { return e.listedEverywhere("demo", "early", 1) })
	// Listed is not yet observed: the event reaches the observer's
	// stream after the state that lists it is published.
	e.c.Eventually(10*time.Second, "its registration observed", func() bool { return len(seen()) >= 1 })
	if evs := seen(); len(evs) != 1 || evs[0].EventType != api.EventRegistered {
		t.Fatalf("the plugin's own events: %v, want its one registration", describeEvents(evs))
	}
}

// TestWaitForSocketEnds: the wait for a socket that never comes ends with
// Start's ctx (its error wrapped), with Stop, and at WithWaitForSocket's
// limit (a timeout error). No agent: the socket's directory does not even
// exist. The stubs' registration timeout is short, so that each wait
// outlasts the retries that would end Start without the option.
func TestWaitForSocketEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-yet", "plugin.sock")
	const regTimeout = 300 * time.Millisecond
	// past: longer than regTimeout and the backoff after it (at most
	// 800ms after 300ms).
	const past = 3 * time.Second
	newStub := func(t *testing.T, wait time.Duration) (*stub.Stub, *dialTimes) {
		looks := &dialTimes{}
		s, err := stub.New(&recorder{}, quiet, stub.WithSocketPath(path), stub.WithPluginType("demo"), stub.WithPluginName("never"),
			stub.WithEndpoint("/run/never.sock"), stub.WithDialer(looks.dial), stub.WithRegistrationTimeout(regTimeout), stub.WithWaitForSocket(wait))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s, looks
	}
	startWaiting := func(t *testing.T, ctx context.Context, s *stub.Stub) <-chan error {
		started := make(chan error, 1)
		go func() { started <- s.Start(ctx) }()
		time.Sleep(past)
		select {
		case err := <-started:
			t.Fatalf("Start returned while it should wait for the socket: %v", err)
		default:
		}
		return started
	}
	ended := func(t *testing.T, started <-chan error, by string) error {
		select {
		case err := <-started:
			if err == nil {
				t.Fatalf("Start ended by %s: nil error", by)
			}
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("Start still waiting 10s after %s", by)
			return nil
		}
	}

	t.Run("ctx", func(t *testing.T) {
		s, _ := newStub(t, 0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := startWaiting(t, ctx, s)
		cancel()
		err := ended(t, started, "ctx's cancel")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Start: %v; want ctx's error wrapped", err)
		}
		t.Logf("Start: %v", err)
	})
	t.Run("Stop", func(t *testing.T) {
		s, _ := newStub(t, 0)
		started := startWaiting(t, context.Background(), s)
		s.Stop()
		err := ended(t, started, "Stop")
		if werr := s.Wait(); werr == nil || werr.Error() != err.Error() {
			t.Fatalf("Wait after Stop in the wait: %v; want Start's error %v", werr, err)
		}
		t.Logf("Start: %v", err)
	})
	t.Run("limit", func(t *testing.T) {
		s, looks := newStub(t, past)
		err := s.Start(context.Background())
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "WithWaitForSocket") {
			t.Fatalf("Start: %v; want a timeout error that names WithWaitForSocket", err)
		}
		t.Logf("Start: %v", err)
		if n := looks.count(); n < 2 {
			t.Fatalf("the stub looked at the socket %d times in %v", n, past)
		}
	})
}

// syncBuffer is a log destination that a test reads while the stub writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A stub whose agent's socket is not there says so at once, in one line
// through its logger: the path it waits for, how long, and how to point it
// elsewhere; it said nothing until its wait ended (15.5 s by default).
// With WithWaitForSocket too, the line names its limit.
func TestStubSaysAtOnceItWaitsForTheSocket(t *testing.T) {
	cases := []struct {
		name string
		opts []stub.Option
		wait string
	}{
		{"retrying the registration", nil, "wait=15s"},
		{"WithWaitForSocket", []stub.Option{stub.WithWaitForSocket(time.Minute)}, "wait=1m0s"},
		{"WithWaitForSocket without a limit", []stub.Option{stub.WithWaitForSocket(0)}, `wait="until stopped"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent", "plugin.sock") // no agent, no directory
			var log syncBuffer
			opts := append([]stub.Option{stub.WithLogger(slog.New(slog.NewTextHandler(&log, nil))), stub.WithSocketPath(path),
				stub.WithPluginType("demo"), stub.WithPluginName("early"), stub.WithEndpoint("/run/early.sock")}, tc.opts...)
			s, err := stub.New(&recorder{}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan error, 1)
			go func() { started <- s.Start(context.Background()) }()
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(log.String(), "waiting for the agent's plugin socket") {
				if time.Now().After(deadline) {
					t.Fatalf("no line about the socket 5 s after Start; the log:\n%s", log.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			select {
			case err := <-started:
				t.Fatalf("Start returned before the test looked: %v", err)
			default:
			}
			line := log.String()
			for _, want := range []string{"path=" + path, tc.wait, "PLUGREG_PLUGIN_SOCKET=PATH", "WithSocketPath"} {
				if !strings.Contains(line, want) {
					t.Errorf("the line does not say %q:\n%s", want, line)
				}
			}
			if n := strings.Count(line, "waiting for the agent's plugin socket"); n != 1 {
				t.Errorf("%d lines about the socket, want 1:\n%s", n, line)
			}
			s.Stop()
			if err := <-started; err == nil {
				t.Fatal("Start succeeded without an agent")
			}
		})
	}
}
