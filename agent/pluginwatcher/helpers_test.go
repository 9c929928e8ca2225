package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/localreg"
	"github.com/plugreg/plugreg/tests/framework/testlog"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor is how long a test waits for a state: generous, because the
// machines are shared; nothing asserts how fast it comes.
const waitFor = 20 * time.Second

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %s", what, last)
}

// shortDir returns a fresh directory with a short path: a unix socket's
// path is limited to 108 bytes, and t.TempDir's paths carry the test name.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dir, err = filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func testLogger(t testing.TB) hclog.Logger {
	return testlog.New(t, t.Name(), hclog.Debug)
}

// ---- registrar: a real registry of one process behind the Registrar interface ----

// storeRegistrar is the test's Registrar: localreg.New, real
// registry code. It counts calls, can be told to fail, and fails the test
// if two calls for one plugin name ever overlap.
type storeRegistrar struct {
	t      testing.TB
	store  *localreg.Local
	nodeID string

	failRegister   atomic.Int32 // fail this many more Register calls
	failDeregister atomic.Int32
	// registerErr is what a failing Register returns (nil:
	// errToldToFail); with applyThenFail it applies first, as a write
	// whose answer was lost does.
	registerErr   atomic.Pointer[error]
	applyThenFail atomic.Bool
	registerDelay atomic.Int64 // a Register takes this long (ns)
	registers     atomic.Int32
	deregisters   atomic.Int32

	mu       sync.Mutex
	inFlight map[string]bool
}

// errToldToFail is a failing call's error when the test gave none: an
// error no one classified, as a transport's may be.
var errToldToFail = errors.New("registrar told to fail")

func newStoreRegistrar(t testing.TB, nodeID string) *storeRegistrar {
	s := localreg.New(1024)
	t.Cleanup(s.Shutdown)
	return &storeRegistrar{t: t, store: s, nodeID: nodeID, inFlight: map[string]bool{}}
}

func (r *storeRegistrar) enter(info *api.PluginInfo) func() {
	k := info.Type + "/" + info.Name
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[k] {
		r.t.Errorf("two operations for %s at once", k)
	}
	r.inFlight[k] = true
	return func() {
		r.mu.Lock()
		delete(r.inFlight, k)
		r.mu.Unlock()
	}
}

func (r *storeRegistrar) Register(ctx context.Context, info *api.PluginInfo) error {
	defer r.enter(info)()
	r.registers.Add(1)
	if d := time.Duration(r.registerDelay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if r.failRegister.Add(-1) >= 0 {
		if r.applyThenFail.Load() {
			if _, err := r.store.RegisterPlugin(ctx, info); err != nil {
				return err
			}
		}
		if err := r.registerErr.Load(); err != nil {
			return *err
		}
		return errToldToFail
	}
	_, err := r.store.RegisterPlugin(ctx, info)
	return err
}

// failRegistersWith makes the next n Register calls fail with err.
func (r *storeRegistrar) failRegistersWith(n int32, err error) {
	r.registerErr.Store(&err)
	r.failRegister.Store(n)
}

func (r *storeRegistrar) Deregister(ctx context.Context, info *api.PluginInfo) error {
	defer r.enter(info)()
	r.deregisters.Add(1)
	if r.failDeregister.Add(-1) >= 0 {
		return errToldToFail
	}
	cur, _, err := r.store.PluginForAlloc(info.Type, info.Name, info.AllocID)
	if err != nil || cur.NodeID != r.nodeID {
		return nil // gone, or another host's now
	}
	_, err = r.store.DeregisterPlugin(ctx, info.Type, info.Name, info.AllocID)
	return err
}

// instances returns the registry's recency list for (typ, name).
func (r *storeRegistrar) instances(typ, name string) []*api.PluginInfo {
	l, _ := r.store.Instances(typ, name)
	return l
}

// ---- fake plugins: real gRPC servers on real unix sockets ----

type fakePlugin struct {
	registerapi.UnimplementedRegistrationServer
	path   string
	server *grpc.Server
	done   chan struct{}

	mu       sync.Mutex
	info     *registerapi.PluginInfo
	infoErr  error
	hang     chan struct{} // non-nil: GetInfo blocks until closed or ctx ends
	statuses []*registerapi.RegistrationStatus
	getInfos int
	notifies int // NotifyRegistrationStatus calls, failed ones too
	// failNotify: fail this many NotifyRegistrationStatus calls (not
	// recorded), as a plugin on a loaded host would time out.
	failNotify int
}

// startPlugin serves the registration API at path, answering info; each
// setup runs before the socket accepts anything.
func startPlugin(t testing.TB, path string, info *registerapi.PluginInfo, setup ...func(*fakePlugin)) *fakePlugin {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &fakePlugin{path: path, info: info, server: grpc.NewServer(), done: make(chan struct{})}
	for _, f := range setup {
		f(p)
	}
	registerapi.RegisterRegistrationServer(p.server, p)
	go func() {
		defer close(p.done)
		_ = p.server.Serve(l)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop ends the server; its socket file is removed.
func (p *fakePlugin) stop() {
	p.setHang(false)
	p.server.Stop()
	<-p.done
}

func (p *fakePlugin) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	p.mu.Lock()
	p.getInfos++
	info, err, hang := p.info, p.infoErr, p.hang
	p.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return info, err
}

func (p *fakePlugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.mu.Lock()
	p.notifies++
	if p.failNotify > 0 {
		p.failNotify--
		p.mu.Unlock()
		return nil, errors.New("busy")
	}
	p.statuses = append(p.statuses, s)
	p.mu.Unlock()
	return &registerapi.RegistrationStatusResponse{}, nil
}

// setInfo changes what GetInfo answers.
func (p *fakePlugin) setInfo(info *registerapi.PluginInfo) {
	p.mu.Lock()
	p.info = info
	p.mu.Unlock()
}

func (p *fakePlugin) setErr(err error) {
	p.mu.Lock()
	p.infoErr = err
	p.mu.Unlock()
}

func (p *fakePlugin) setHang(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.hang == nil:
		p.hang = make(chan struct{})
	case !on && p.hang != nil:
		close(p.hang)
		p.hang = nil
	}
}

func (p *fakePlugin) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.getInfos
}

// notifyCalls returns how many NotifyRegistrationStatus calls came.
func (p *fakePlugin) notifyCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notifies
}

// toldFalse returns the "not registered" notices received.
func (p *fakePlugin) toldFalse() []*registerapi.RegistrationStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*registerapi.RegistrationStatus
	for _, s := range p.statuses {
		if !s.PluginRegistered {
			out = append(out, s)
		}
	}
	return out
}

// lastStatus returns the last NotifyRegistrationStatus received, or nil.
func (p *fakePlugin) lastStatus() *registerapi.RegistrationStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.statuses) == 0 {
		return nil
	}
	return p.statuses[len(p.statuses)-1]
}

func (p *fakePlugin) statusString() string {
	s := p.lastStatus()
	if s == nil {
		return "no status yet"
	}
	return fmt.Sprintf("registered=%v error=%q", s.PluginRegistered, s.Error)
}

// ---- the watcher under test ----

type fixture struct {
	dir string
	reg *storeRegistrar
	w   *Watcher
}

const testNode = "node-7"

// testConfig has short timeouts, so that tests see retries and probes
// quickly; tests never rely on how quickly.
func testConfig(t testing.TB, dir string, reg Registrar) Config {
	var cfg Config
	cfg.Dir = dir
	cfg.NodeID = testNode
	cfg.Registrar = reg
	cfg.Logger = testLogger(t)
	cfg.GetInfoTimeout = 2 * time.Second
	cfg.ProbeInterval = 100 * time.Millisecond
	cfg.RetryMin = 20 * time.Millisecond
	cfg.RetryMax = 200 * time.Millisecond
	return cfg
}

// newFixture makes a plugins dir and a registrar; start runs the watcher.
func newFixture(t *testing.T) *fixture {
	return &fixture{dir: shortDir(t), reg: newStoreRegistrar(t, testNode)}
}

func (f *fixture) start(t *testing.T, mod ...func(*Config)) *Watcher {
	t.Helper()
	cfg := testConfig(t, f.dir, f.reg)
	for _, m := range mod {
		m(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	f.w = w
	return w
}

// waitRegistered waits until the registry's newest instance of (typ, name)
// is the one at socket path, and the watcher holds it, and returns it.
func (f *fixture) waitRegistered(t *testing.T, typ, name, path string) *api.PluginInfo {
	t.Helper()
	var got *api.PluginInfo
	eventually(t, fmt.Sprintf("%s/%s registered from %s", typ, name, path), func() (bool, string) {
		l := f.reg.instances(typ, name)
		if len(l) == 0 {
			return false, "not in the registry"
		}
		got = l[0]
		if got.AllocID != AllocID(testNode, path) {
			return false, fmt.Sprintf("newest is %s", got.Options[OptionRegistrationSocket])
		}
		for _, p := range f.w.Plugins() {
			if p.Type == typ && p.Name == name && p.AllocID == got.AllocID {
				return true, ""
			}
		}
		return false, "not in Plugins()"
	})
	return got
}

// waitGone waits until (typ, name) is in neither the registry nor Plugins().
func (f *fixture) waitGone(t *testing.T, typ, name string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s/%s deregistered", typ, name), func() (bool, string) {
		if l := f.reg.instances(typ, name); len(l) > 0 {
			return false, fmt.Sprintf("%d instances in the registry", len(l))
		}
		for _, p := range f.w.Plugins() {
			if p.Type == typ && p.Name == name {
				return false, "still in Plugins()"
			}
		}
		return true, ""
	})
}

func waitStatus(t *testing.T, p *fakePlugin, registered bool) *registerapi.RegistrationStatus {
	t.Helper()
	eventually(t, fmt.Sprintf("NotifyRegistrationStatus(%v) at %s", registered, p.path), func() (bool, string) {
		s := p.lastStatus()
		return s != nil && s.PluginRegistered == registered, p.statusString()
	})
	return p.lastStatus()
}

func draInfo(name string) *registerapi.PluginInfo {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: name, SupportedVersions: []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}}
}
