package stub_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/plugreg/plugreg/agent/pluginsock"
	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/api/pluginrpc"
	"github.com/plugreg/plugreg/stub"
)

// TestRegisterReceiveStop: a stub registers with the agent of node 1, is
// listed by every server, gets exactly the events of the type it asked
// for (with their write indexes, in order), and Stop deregisters it at
// once.
func TestRegisterReceiveStop(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	seen := e.observe("demo", "p1")
	r := &recorder{}
	s := e.startStub(r, stub.WithPluginName("p1"),
		stub.WithEndpoint("/run/p1.sock"), stub.WithVersion("1.0"), stub.WithEventMask(stub.AllEvents, "watched"))
	e.c.Eventually(10*time.Second, "the plugin listed on every server", func() bool { return e.listedEverywhere("demo", "p1", 1) })
	res, err := e.c.Nodes[1].Backend().Query(context.Background(), api.Query{Kind: api.QueryInstances, Type: "demo", Name: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Plugins[0]
	if p.NodeID != e.c.Nodes[0].Config.NodeID || p.Version != "1.0" || p.ConnectionInfo.SocketPath != "/run/p1.sock" ||
		p.Options[api.OptionSource] != api.SourceStub || p.Options[pluginsock.OptionIdx] != "00" {
		t.Fatalf("registered %+v", p)
	}
	if got := s.RequestTimeout(); got != 10*time.Second {
		t.Errorf("RequestTimeout %v, want the agent's 10s", got)
	}
	if got := s.RegistrationTimeout(); got != 5*time.Second {
		t.Errorf("RegistrationTimeout %v, want the agent's 5s", got)
	}

	var want []uint64
	for i := range 3 {
		want = append(want, e.register("watched", fmt.Sprint("w", i)))
		e.register("other", fmt.Sprint("o", i))
	}
	e.c.Eventually(10*time.Second, "the watched events delivered", func() bool { return len(r.got()) >= 3 })
	time.Sleep(200 * time.Millisecond) // nothing more may come
	if got := indexes(r.got()); !slices.Equal(got, want) {
		t.Fatalf("delivered indexes %v, want %v", got, want)
	}
	for _, ev := range r.got() {
		if ev.EventType != api.EventRegistered || ev.Info.Type != "watched" {
			t.Errorf("delivered %s %+v", ev.EventType, ev.Info)
		}
	}

	s.Stop()
	if !e.listedEverywhere("demo", "p1", 0) { // at once: Stop waited for the write
		e.c.Eventually(5*time.Second, "the plugin gone from every server", func() bool { return e.listedEverywhere("demo", "p1", 0) })
	}
	if err := s.Wait(); err != nil {
		t.Errorf("Wait after Stop: %v", err)
	}
	e.c.Eventually(5*time.Second, "its two events observed", func() bool { return len(seen()) == 2 })
	if evs := seen(); evs[0].EventType != api.EventRegistered || evs[1].EventType != api.EventDeregistered {
		t.Fatalf("observed %v %v", evs[0].EventType, evs[1].EventType)
	}
}

// TestReconnectReclaimsWithoutEvents: the connection is cut (and refused
// for a while) with writes going on; the stub reconnects within the grace
// period with its token. Nothing is written for the plugin (no event for
// it anywhere), and its handlers get every event written meanwhile,
// exactly once, in order.
func TestReconnectReclaimsWithoutEvents(t *testing.T) {
	e := newEnv(t, 5*time.Second)
	seen := e.observe("demo", "p1")
	r := &recorder{}
	cut := &cutter{}
	var closes atomic.Int32
	e.startStub(r, stub.WithDialer(cut.dial), stub.WithPluginName("p1"), stub.WithEndpoint("/run/p1.sock"), stub.WithEventMask(stub.Registered, "watched"),
		stub.WithOnClose(func() { closes.Add(1) }))
	e.c.Eventually(10*time.Second, "registered", func() bool { return len(seen()) == 1 })

	var want []uint64
	for round := range 3 {
		want = append(want, e.register("watched", fmt.Sprint("before", round)))
		cut.cut(true)
		for i := range 5 {
			want = append(want, e.register("watched", fmt.Sprint("during", round, i)))
		}
		time.Sleep(300 * time.Millisecond)
		cut.allow()
		want = append(want, e.register("watched", fmt.Sprint("after", round)))
		e.c.Eventually(10*time.Second, "every event delivered", func() bool { return len(r.got()) >= len(want) })
	}
	time.Sleep(200 * time.Millisecond)
	if got := indexes(r.got()); !slices.Equal(got, want) {
		t.Fatalf("delivered indexes %v\nwant %v", got, want)
	}
	if closes.Load() < 3 {
		t.Errorf("OnClose called %d times for 3 cuts", closes.Load())
	}
	if evs := seen(); len(evs) != 1 {
		t.Fatalf("the plugin's own events: %v, want its one registration", describeEvents(evs))
	}
	if st := e.svc.Plugins.Stats(); st.Reclaims < 3 || st.Expired != 0 {
		t.Errorf("agent stats %+v", st)
	}
}

// TestGraceExpires: a plugin whose connection is cut for good is
// deregistered after the grace period, not before.
func TestGraceExpires(t *testing.T) {
	const grace = 1500 * time.Millisecond
	e := newEnv(t, grace)
	seen := e.observe("demo", "p1")
	cut := &cutter{}
	e.startStub(&recorder{}, stub.WithDialer(cut.dial), stub.WithPluginName("p1"), stub.WithEndpoint("/run/p1.sock"))
	e.c.Eventually(10*time.Second, "registered", func() bool { return len(seen()) == 1 })
	cutAt := time.Now()
	cut.cut(true)
	e.c.Eventually(grace+20*time.Second, "deregistered", func() bool { return len(seen()) == 2 })
	if took := time.Since(cutAt); took < grace {
		t.Fatalf("deregistered %v after the cut, before the grace period (%v)", took, grace)
	}
	if ev := seen()[1]; ev.EventType != api.EventDeregistered {
		t.Fatalf("second event %s", ev.EventType)
	}
	// Back after the grace period: a new registration.
	cut.allow()
	e.c.Eventually(20*time.Second, "registered again", func() bool { return len(seen()) == 3 })
}

// TestAgentRestart: the agent's services stop (the stub hears Shutdown)
// and start again on the same socket; the stub reconnects, is registered
// once (no event for it), and its events resume without a gap.
func TestAgentRestart(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	seen := e.observe("demo", "p1")
	r := &recorder{}
	e.startStub(r, stub.WithPluginName("p1"),
		stub.WithEndpoint("/run/p1.sock"), stub.WithEventMask(stub.Registered, "watched"))
	e.c.Eventually(10*time.Second, "registered", func() bool { return len(seen()) == 1 })
	want := []uint64{e.register("watched", "before")}
	e.c.Eventually(10*time.Second, "first event", func() bool { return len(r.got()) == 1 })

	e.svc.Stop()
	for i := range 5 {
		want = append(want, e.register("watched", fmt.Sprint("down", i)))
	}
	e.startAgent()
	want = append(want, e.register("watched", "after"))
	e.c.Eventually(20*time.Second, "every event delivered", func() bool { return len(r.got()) >= len(want) })
	time.Sleep(200 * time.Millisecond)
	if got := indexes(r.got()); !slices.Equal(got, want) {
		t.Fatalf("delivered indexes %v\nwant %v", got, want)
	}
	r.mu.Lock()
	shutdowns, configs := r.shutdowns, slices.Clone(r.configs)
	r.mu.Unlock()
	if shutdowns != 1 || len(configs) != 2 {
		t.Errorf("shutdowns %d, configures %v", shutdowns, configs)
	}
	if evs := seen(); len(evs) != 1 {
		t.Fatalf("the plugin's own events: %v, want its one registration", describeEvents(evs))
	}
	if !e.listedEverywhere("demo", "p1", 1) {
		t.Fatal("not listed after the agent's restart")
	}
}

// TestAgentRestartWhilePluginBacksOff: an agent whose grace period is
// shorter than the stub's reconnect backoff (it grows to 5s) restarts
// while a plugin waits between two attempts. The plugin comes back later
// than the grace period after the agent's start, but it was running and
// retrying all along: it must not be deregistered (no event for it).
func TestAgentRestartWhilePluginBacksOff(t *testing.T) {
	const grace = 500 * time.Millisecond
	e := newEnv(t, grace)
	seen := e.observe("demo", "p1")
	dials := &dialTimes{}
	e.startStub(&recorder{}, stub.WithDialer(dials.dial), stub.WithPluginName("p1"), stub.WithEndpoint("/run/p1.sock"))
	e.c.Eventually(10*time.Second, "registered", func() bool { return len(seen()) == 1 })

	// The agent down until the stub's attempts are 1.6s apart or more (its
	// backoff: 0.8-1.6s, then 1.6-3.2s, then 2.5-5s); restarted right
	// after one, so that the next comes well after the grace period.
	e.svc.Stop()
	e.regTimeout = time.Second // a shorter return window: a quicker test
	e.c.Eventually(20*time.Second, "the stub's attempts 1.7s apart", func() bool { return dials.lastGap() >= 1700*time.Millisecond })
	n := dials.count()
	e.c.Eventually(10*time.Second, "the next attempt", func() bool { return dials.count() > n })
	e.startAgent()
	restarted := time.Now()
	e.c.Eventually(10*time.Second, "reconnected", func() bool { return e.svc.Plugins.Stats().Live == 1 })
	if took := time.Since(restarted); took < grace {
		t.Fatalf("reconnected %v after the restart, within the grace period (%v): the test proves nothing", took, grace)
	}
	// Past the time the restarted agent gives its plugins to come back:
	// anti-entropy may then remove the host's registrations that are gone.
	time.Sleep(time.Until(restarted.Add(e.svc.Plugins.ReturnWindow() + time.Second)))
	if evs := seen(); len(evs) != 1 {
		t.Fatalf("the plugin's own events across the restart: %v; want its one registration", kindsOf(evs))
	}
	if !e.listedEverywhere("demo", "p1", 1) {
		t.Fatal("not listed after the agent's restart")
	}
}

// dialTimes is a dialer that records when it was called.
type dialTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (d *dialTimes) dial(ctx context.Context, path string) (net.Conn, error) {
	d.mu.Lock()
	d.at = append(d.at, time.Now())
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, "unix", path)
}

func (d *dialTimes) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.at)
}

// lastGap is the time between the last two dials.
func (d *dialTimes) lastGap() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.at) < 2 {
		return 0
	}
	return d.at[len(d.at)-1].Sub(d.at[len(d.at)-2])
}

func kindsOf(evs []*api.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s@%d", ev.EventType, ev.Index))
	}
	return out
}

// rawSession opens a session with the agent without the stub, to say what
// the stub never would.
func rawSession(t *testing.T, path string) pluginrpc.Plugins_SessionClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := pluginrpc.NewPluginsClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRefusals: bad input to either side ends in a clear error and
// registers nothing.
func TestRefusals(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	ok := []stub.Option{stub.WithSocketPath(e.path), stub.WithPluginType("demo"), stub.WithEndpoint("/run/x.sock")}
	start := func(p any, opts ...stub.Option) error {
		s, err := stub.New(p, append(opts, quiet)...)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err = s.Start(ctx)
		if err == nil {
			t.Cleanup(s.Stop)
		}
		return err
	}
	// One good plugin, for the duplicate below.
	if err := start(&recorder{}, append(ok, stub.WithPluginName("taken"))...); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(filepath.Dir(e.path), "garbage.sock")
	gl, err := net.Listen("unix", garbage)
	if err != nil {
		t.Fatal(err)
	}
	defer gl.Close()
	go func() {
		for {
			c, err := gl.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nthis is not a plugreg agent\n"))
			c.Close()
		}
	}()

	for _, tc := range []struct {
		name string
		err  func() error
		want string
		code codes.Code
	}{
		{"no socket", func() error {
			return start(&recorder{}, stub.WithSocketPath(e.path+".missing"), stub.WithPluginType("demo"), stub.WithPluginName("a"), stub.WithEndpoint("/x"))
		}, "no plugin socket at", codes.Unknown},
		{"garbage peer", func() error {
			return start(&recorder{}, stub.WithSocketPath(garbage), stub.WithPluginType("demo"), stub.WithPluginName("a"), stub.WithEndpoint("/x"))
		}, "session with the agent at", codes.Unavailable},
		{"no endpoint", func() error { return start(&recorder{}, stub.WithSocketPath(e.path), stub.WithPluginType("demo")) }, "no endpoint", codes.Unknown},
		{"bad idx", func() error { return start(&recorder{}, append(ok, stub.WithPluginIdx("7"))...) }, "two digits", codes.Unknown},
		{"zero registration timeout", func() error { return start(&recorder{}, append(ok, stub.WithRegistrationTimeout(0))...) }, "(WithRegistrationTimeout) is not positive", codes.Unknown},
		{"negative socket wait", func() error { return start(&recorder{}, append(ok, stub.WithWaitForSocket(-time.Second))...) }, "(WithWaitForSocket) is negative", codes.Unknown},
		{"reserved option", func() error {
			return start(&recorder{}, append(ok, stub.WithPluginName("a"), stub.WithOptions(map[string]string{"plugreg.source": "x"}))...)
		}, "reserved", codes.InvalidArgument},
		{"duplicate", func() error { return start(&recorder{}, append(ok, stub.WithPluginName("taken"))...) }, "connected in another session", codes.AlreadyExists},
		{"configure fails", func() error { return start(failingConfigure{}, append(ok, stub.WithPluginName("b"))...) }, "Configure failed", codes.Unknown},
		{"type with a slash (raw)", func() error {
			st := rawSession(t, e.path)
			st.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: &pb.Register{Type: "a/b", Name: "n", Idx: "00", Endpoint: &pb.Endpoint{Address: "x"}}}})
			_, err := st.Recv()
			return err
		}, "contains '/'", codes.InvalidArgument},
		// Refused where it enters the agent, before a session starts:
		// not taken as a registration the server would refuse, pending
		// and retried by the host for good.
		{"a dot segment as the name (raw)", func() error {
			st := rawSession(t, e.path)
			st.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: &pb.Register{Type: "demo", Name: "..", Idx: "00", Endpoint: &pb.Endpoint{Address: "x"}}}})
			_, err := st.Recv()
			return err
		}, "are not names", codes.InvalidArgument},
		{"no endpoint (raw)", func() error {
			st := rawSession(t, e.path)
			st.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: &pb.Register{Type: "demo", Name: "n", Idx: "00"}}})
			_, err := st.Recv()
			return err
		}, "SocketPath or an Address", codes.InvalidArgument},
		{"subscribe first (raw)", func() error {
			st := rawSession(t, e.path)
			st.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Subscribe{Subscribe: &pb.Subscribe{}}})
			_, err := st.Recv()
			return err
		}, "must be Register", codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if tc.code != codes.Unknown {
				if got := status.Code(err); got != tc.code {
					t.Errorf("code %v, want %v: %v", got, tc.code, err)
				}
			}
		})
	}
	res, err := e.c.Nodes[0].Backend().Query(context.Background(), api.Query{Kind: api.QueryNode, NodeID: e.c.Nodes[0].Config.NodeID})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plugins) != 1 || res.Plugins[0].Name != "taken" {
		t.Fatalf("registered on the node: %v, want only the good plugin", res.Plugins)
	}
}

// quiet keeps the stubs' logs out of the test's output.
var quiet = stub.WithLogger(slog.New(slog.DiscardHandler))

type failingConfigure struct{}

func (failingConfigure) Configure(context.Context, stub.Config) (stub.EventMask, error) {
	return 0, errors.New("no thanks")
}

// blocked is a plugin whose handler never returns (until the test ends).
type blocked struct{ release chan struct{} }

func (b blocked) Registered(ctx context.Context, ev *api.Event) error {
	<-b.release
	return nil
}

// panicky is a plugin whose handler always panics.
type panicky struct{ calls atomic.Int32 }

func (p *panicky) Registered(context.Context, *api.Event) error {
	p.calls.Add(1)
	panic("handler bug")
}

// TestStuckPanickingAndSilentPluginsAffectOnlyThemselves: one plugin's
// handler never returns, one's panics on every event, and one raw session
// never reads its stream; a fourth plugin gets every one of 2,000 events
// and all four stay registered.
func TestStuckPanickingAndSilentPluginsAffectOnlyThemselves(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	release := make(chan struct{})
	var stubs []*stub.Stub
	defer func() {
		close(release) // before Stop, which waits for a running handler
		for _, s := range stubs {
			s.Stop()
		}
	}()
	opts := func(name string) []stub.Option {
		return []stub.Option{stub.WithSocketPath(e.path), stub.WithPluginType("demo"), stub.WithPluginName(name),
			stub.WithEndpoint("/run/x.sock"), stub.WithEventMask(stub.Registered, "load")}
	}
	pk := &panicky{}
	good := &recorder{}
	for _, p := range []struct {
		name string
		p    any
	}{{"stuck", blocked{release}}, {"panicky", pk}, {"good", good}} {
		s, err := stub.New(p.p, append(opts(p.name), quiet)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		stubs = append(stubs, s)
	}
	silent := rawSession(t, e.path)
	silent.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: &pb.Register{Type: "demo", Name: "silent", Idx: "00", Endpoint: &pb.Endpoint{Address: "x"}}}})
	if _, err := silent.Recv(); err != nil { // Configure; then it never reads again
		t.Fatal(err)
	}
	silent.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Subscribe{Subscribe: &pb.Subscribe{Mask: uint32(stub.AllEvents)}}})

	const n = 2000
	var want []uint64
	for i := range n {
		want = append(want, e.register("load", fmt.Sprint("l", i)))
	}
	e.c.Eventually(60*time.Second, "the good plugin has every event", func() bool { return len(good.got()) >= n })
	if got := indexes(good.got()); !slices.Equal(got, want) {
		t.Fatalf("the good plugin got %d events, not the %d written in order", len(got), n)
	}
	if pk.calls.Load() < n {
		e.c.Eventually(60*time.Second, "the panicking handler called for every event", func() bool { return pk.calls.Load() >= n })
	}
	res, err := e.c.Nodes[0].Backend().Query(context.Background(), api.Query{Kind: api.QueryNode, NodeID: e.c.Nodes[0].Config.NodeID})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plugins) != 4 {
		t.Fatalf("%d plugins registered on the node, want 4 (stuck, panicky, good, silent)", len(res.Plugins))
	}
	if st := e.svc.Plugins.Stats(); st.Live != 4 {
		t.Fatalf("agent stats %+v, want 4 live sessions", st)
	}
}

// TestWithoutReconnectAndResumeIndex: a stub told not to reconnect ends
// when its connection goes (Wait says why, OnClose is called); a new one
// started WithResumeFrom the old one's Position gets exactly the events
// after it, including those written while no stub ran.
func TestWithoutReconnectAndResumeFrom(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	r1 := &recorder{}
	cut := &cutter{}
	closed := make(chan struct{})
	s1 := e.startStub(r1, stub.WithPluginName("p1"), stub.WithEndpoint("/run/p1.sock"), stub.WithDialer(cut.dial),
		stub.WithEventMask(stub.Registered, "watched"), stub.WithoutReconnect(), stub.WithOnClose(func() { close(closed) }))
	first := e.register("watched", "w0")
	e.c.Eventually(10*time.Second, "the first event", func() bool { return len(r1.got()) == 1 })
	cut.cut(true)
	<-closed
	if err := s1.Wait(); err == nil {
		t.Fatal("Wait after the connection went, without reconnect: nil, want why")
	}
	pos := s1.Position()
	if max(pos.Complete, pos.Partial) < first {
		t.Fatalf("position %+v before the delivered event at %d", pos, first)
	}
	var want []uint64
	for i := range 3 {
		want = append(want, e.register("watched", fmt.Sprint("gap", i)))
	}
	r2 := &recorder{}
	e.startStub(r2, stub.WithPluginName("p1"), stub.WithPluginIdx("01"), stub.WithEndpoint("/run/p1.sock"),
		stub.WithEventMask(stub.Registered, "watched"), stub.WithResumeFrom(pos))
	want = append(want, e.register("watched", "after"))
	e.c.Eventually(10*time.Second, "the events after the position", func() bool { return len(r2.got()) >= len(want) })
	time.Sleep(200 * time.Millisecond)
	if got := indexes(r2.got()); !slices.Equal(got, want) {
		t.Fatalf("resumed stub got %v, want %v", got, want)
	}
}
