package pluginsock_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/agent/pluginsock"
	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/api/pluginrpc"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// env is a real one-server cluster in-process with the agent's services
// (anti-entropy and the plugin socket) over it.
type env struct {
	t    *testing.T
	c    *testcluster.Cluster
	dir  string
	cfg  pluginsock.Config
	svc  *agent.Services
	node string
}

func newEnv(t *testing.T, modify func(*pluginsock.Config)) *env {
	t.Helper()
	c := testcluster.New(t, 1, testcluster.Options{})
	dir, err := os.MkdirTemp("", "psock") // short: 107 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	be := c.Nodes[0].Backend()
	e := &env{t: t, c: c, dir: dir, node: be.NodeID(), cfg: pluginsock.Config{
		Path: filepath.Join(dir, "p.sock"), Grace: 2 * time.Second, RegistrationTimeout: 2 * time.Second, Heartbeat: 200 * time.Millisecond, Events: be,
	}}
	if modify != nil {
		modify(&e.cfg)
	}
	e.start()
	t.Cleanup(func() { e.svc.Stop() })
	return e
}

func (e *env) start() {
	e.t.Helper()
	cfg := e.cfg
	svc, err := agent.StartServices(e.c.Nodes[0].Backend(), agent.ServicesConfig{PluginSocket: &cfg})
	if err != nil {
		e.t.Fatal(err)
	}
	e.svc = svc
}

// plugins are the node's registered instances.
func (e *env) plugins() []*api.PluginInfo {
	e.t.Helper()
	res, err := e.c.Nodes[0].Backend().Query(context.Background(), api.Query{Kind: api.QueryNode, NodeID: e.node})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Plugins
}

// sess is a raw session: the test says what it likes.
type sess struct {
	t  *testing.T
	st pluginrpc.Plugins_SessionClient
	cc *grpc.ClientConn
}

func (e *env) open() *sess {
	e.t.Helper()
	cc, err := grpc.NewClient("unix://"+e.cfg.Path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cc.Close() })
	st, err := pluginrpc.NewPluginsClient(cc).Session(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return &sess{t: e.t, st: st, cc: cc}
}

func reg(name, version, token string) *pb.PluginMessage {
	return &pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: &pb.Register{
		Type: "demo", Name: name, Idx: "00", Version: version, Endpoint: &pb.Endpoint{SocketPath: "/run/x.sock"}, SessionToken: token,
	}}}
}

var subscribe = &pb.PluginMessage{Msg: &pb.PluginMessage_Subscribe{Subscribe: &pb.Subscribe{}}}
var stop = &pb.PluginMessage{Msg: &pb.PluginMessage_Stop{Stop: &pb.Stop{}}}

// register runs a handshake to Ready and returns the Configure and Ready.
func (s *sess) register(name, version, token string) (*pb.Configure, *pb.Ready) {
	s.t.Helper()
	if err := s.st.Send(reg(name, version, token)); err != nil {
		s.t.Fatal(err)
	}
	m, err := s.st.Recv()
	if err != nil {
		s.t.Fatalf("register %s: %v", name, err)
	}
	if err := s.st.Send(subscribe); err != nil {
		s.t.Fatal(err)
	}
	r, err := s.st.Recv()
	if err != nil || r.GetReady() == nil {
		s.t.Fatalf("ready %s: %v %v", name, r, err)
	}
	return m.GetConfigure(), r.GetReady()
}

// end reads until the session ends and returns its status.
func (s *sess) end() error {
	for {
		if _, err := s.st.Recv(); err != nil {
			return err
		}
	}
}

func TestSocketFile(t *testing.T) {
	e := newEnv(t, nil)
	fi, err := os.Stat(e.cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, want a socket with 0660", fi.Mode())
	}
	be := e.c.Nodes[0].Backend()
	listen := func(path string) error {
		s, err := pluginsock.Listen(pluginsock.Config{Path: path, NodeID: "n", Registrar: e.svc.Host, Events: be})
		if err == nil {
			s.Stop()
		}
		return err
	}
	stale := filepath.Join(e.dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the file stays, nobody listens: a crashed agent's
	regular := filepath.Join(e.dir, "file")
	os.WriteFile(regular, []byte("x"), 0o644)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"live socket", e.cfg.Path, "another process is listening"},
		{"regular file", regular, "not a socket"},
		{"too long", filepath.Join(e.dir, strings.Repeat("x", 120)), "at most 107"},
		{"stale socket", stale, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := listen(tc.path)
			if tc.want == "" && err != nil {
				t.Fatalf("listen: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("listen: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(regular); err != nil {
		t.Fatalf("the regular file was touched: %v", err)
	}
}

func TestConfigureCarriesConfigAndTimeouts(t *testing.T) {
	e := newEnv(t, func(c *pluginsock.Config) { c.ConfigDir = "" })
	confDir := filepath.Join(e.dir, "conf")
	os.Mkdir(confDir, 0o755)
	os.WriteFile(filepath.Join(confDir, "00-p1.conf"), []byte("level=debug\n"), 0o644)
	os.WriteFile(filepath.Join(confDir, "p2.conf"), []byte("by name"), 0o644)
	os.WriteFile(filepath.Join(confDir, "big.conf"), make([]byte, 300<<10), 0o644)
	e.svc.Stop()
	e.cfg.ConfigDir = confDir
	e.start()
	for _, tc := range []struct{ name, want string }{{"p1", "level=debug\n"}, {"p2", "by name"}, {"p3", ""}} {
		cfg, _ := e.open().register(tc.name, "1", "")
		if cfg.GetConfig() != tc.want || cfg.GetNodeId() != e.node || cfg.GetRegistrationTimeoutMs() != 2000 ||
			cfg.GetRequestTimeoutMs() != 10000 || cfg.GetSessionToken() == "" || !strings.HasPrefix(cfg.GetAllocId(), "s-00-") {
			t.Errorf("%s: Configure %v", tc.name, cfg)
		}
	}
	s := e.open()
	s.st.Send(reg("big", "1", ""))
	if _, err := s.st.Recv(); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("oversize config: %v", err)
	}
}

func TestHandshakeTimeoutRegistersNothing(t *testing.T) {
	e := newEnv(t, func(c *pluginsock.Config) { c.RegistrationTimeout = 300 * time.Millisecond })
	silent := e.open() // never says Register
	if err := silent.end(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("no Register: %v", err)
	}
	half := e.open() // Register, then never Subscribe
	half.st.Send(reg("p1", "1", ""))
	if err := half.end(); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "Subscribe") {
		t.Fatalf("no Subscribe: %v", err)
	}
	if p := e.plugins(); len(p) != 0 {
		t.Fatalf("registered %v", p)
	}
	if st := e.svc.Plugins.Stats(); st.Live+st.InGrace != 0 {
		t.Fatalf("agent holds %+v", st)
	}
}

// TestTakeover: a live plugin cannot be taken without its token; with it,
// the old session is ended and nothing is written; a plugin in grace is
// taken over by a new process without the token; a changed registration
// is written.
func TestTakeover(t *testing.T) {
	e := newEnv(t, nil)
	a := e.open()
	cfgA, readyA := a.register("p1", "1", "")
	if readyA.GetIndex() == 0 || cfgA.GetReclaimed() {
		t.Fatalf("first registration: %v %v", cfgA, readyA)
	}
	first := e.plugins()[0].ModifyIndex

	b := e.open()
	b.st.Send(reg("p1", "1", "not-the-token"))
	if err := b.end(); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("wrong token: %v", err)
	}
	c := e.open()
	cfgC, readyC := c.register("p1", "1", cfgA.GetSessionToken())
	if !cfgC.GetReclaimed() || readyC.GetIndex() != 0 {
		t.Fatalf("reclaim with the token: %v %v", cfgC, readyC)
	}
	if err := a.end(); status.Code(err) != codes.Aborted {
		t.Fatalf("superseded session: %v", err)
	}
	c.cc.Close() // killed: in grace now
	time.Sleep(100 * time.Millisecond)
	d := e.open()
	cfgD, readyD := d.register("p1", "1", "") // a restarted process: no token
	if !cfgD.GetReclaimed() || readyD.GetIndex() != 0 {
		t.Fatalf("takeover in grace: %v %v", cfgD, readyD)
	}
	if p := e.plugins(); len(p) != 1 || p[0].ModifyIndex != first {
		t.Fatalf("after reclaims: %v (written again?)", p)
	}
	if cfgD.GetSessionToken() == cfgA.GetSessionToken() {
		t.Fatal("a new process took the plugin over and kept the old token")
	}
	old := e.open() // the old process, still alive somewhere, cannot take it back
	old.st.Send(reg("p1", "1", cfgA.GetSessionToken()))
	if err := old.end(); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the old token after a takeover: %v", err)
	}
	d.cc.Close()
	time.Sleep(100 * time.Millisecond)
	f := e.open()
	_, readyF := f.register("p1", "2", "") // came back changed
	if readyF.GetIndex() <= first {
		t.Fatalf("changed registration not written: %v", readyF)
	}
	if p := e.plugins(); len(p) != 1 || p[0].Version != "2" {
		t.Fatalf("after the change: %v", p)
	}
}

// TestStopWhileReconnecting: a plugin in grace that says Stop right after
// Configure is deregistered at once.
func TestStopWhileReconnecting(t *testing.T) {
	e := newEnv(t, func(c *pluginsock.Config) { c.Grace = time.Minute })
	a := e.open()
	cfg, _ := a.register("p1", "1", "")
	a.cc.Close()
	b := e.open()
	b.st.Send(reg("p1", "1", cfg.GetSessionToken()))
	if _, err := b.st.Recv(); err != nil {
		t.Fatal(err)
	}
	b.st.Send(stop)
	if err := b.end(); err.Error() != "EOF" {
		t.Fatalf("stop: %v, want the stream ended OK", err)
	}
	if p := e.plugins(); len(p) != 0 {
		t.Fatalf("still registered: %v", p)
	}
}

func TestMaxSessions(t *testing.T) {
	e := newEnv(t, func(c *pluginsock.Config) { c.MaxSessions = 2 })
	e.open().register("p1", "1", "")
	e.open().register("p2", "1", "")
	s := e.open()
	s.st.Send(reg("p3", "1", ""))
	if err := s.end(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third plugin: %v", err)
	}
	if p := e.plugins(); len(p) != 2 {
		t.Fatalf("registered %d", len(p))
	}
}

// TestAgentRestartKeepsThenCleans: the agent stops; its plugins stay
// registered. It starts again: a plugin that reconnects is registered
// once (nothing written); one that does not come back within the grace
// period is removed by anti-entropy.
func TestAgentRestartKeepsThenCleans(t *testing.T) {
	e := newEnv(t, func(c *pluginsock.Config) { c.Grace = time.Second })
	back := e.open()
	cfg, _ := back.register("back", "1", "")
	e.open().register("gone", "1", "")
	e.svc.Stop()
	if err := back.end(); status.Code(err) != codes.Unavailable {
		t.Fatalf("session at the agent's stop: %v", err)
	}
	if p := e.plugins(); len(p) != 2 {
		t.Fatalf("after the agent stopped: %d registered, want both kept", len(p))
	}
	before := e.plugins()
	e.start()
	// The restarted agent does not know the plugin: it writes, and the
	// registry answers unchanged (no event), keeping ModifyIndex (below).
	e.open().register("back", "1", cfg.GetSessionToken())
	e.c.Eventually(15*time.Second, "anti-entropy removes the plugin that did not come back", func() bool { return len(e.plugins()) == 1 })
	after := e.plugins()[0]
	var was *api.PluginInfo
	for _, p := range before {
		if p.Name == "back" {
			was = p
		}
	}
	if after.Name != "back" || after.ModifyIndex != was.ModifyIndex {
		t.Fatalf("left %+v, want 'back' unchanged (was %+v)", after, was)
	}
}

// TestRestartBeforeTheAgentNoticed: a restarted plugin whose Register
// arrives before the agent has seen its old connection end waits for it
// (briefly) instead of being refused as a duplicate.
func TestRestartBeforeTheAgentNoticed(t *testing.T) {
	e := newEnv(t, nil)
	old := e.open()
	old.register("p1", "1", "")
	go func() {
		time.Sleep(200 * time.Millisecond)
		old.cc.Close()
	}()
	cfg, ready := e.open().register("p1", "1", "") // no token: a new process
	if !cfg.GetReclaimed() || ready.GetIndex() != 0 {
		t.Fatalf("restarted plugin: %v %v, want its registration reclaimed", cfg, ready)
	}
	dup := e.open() // and a real duplicate is still refused, after the wait
	dup.st.Send(reg("p1", "1", ""))
	if err := dup.end(); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("duplicate: %v", err)
	}
}

// TestGarbagePeer: peers that speak something else on the socket (junk,
// HTTP/1.1, an HTTP/2 preface and then junk) are dropped; nothing is
// registered, and the next plugin registers as usual.
func TestGarbagePeer(t *testing.T) {
	e := newEnv(t, nil)
	for _, junk := range []string{
		"\x00\x01\x02 not a protocol at all \xff\xfe",
		"GET /v1/plugins HTTP/1.1\r\nHost: x\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x09\x00\x00\x00\x00\x00garbage",
	} {
		c, err := net.Dial("unix", e.cfg.Path)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte(junk))
		buf := make([]byte, 4096)
		for { // until the agent closes it
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("the agent kept a garbage connection open: %q", junk)
				}
				break
			}
		}
		c.Close()
	}
	if p := e.plugins(); len(p) != 0 {
		t.Fatalf("registered %v", p)
	}
	if _, ready := e.open().register("p1", "1", ""); ready.GetIndex() == 0 {
		t.Fatal("a plugin after the garbage was not registered")
	}
}
