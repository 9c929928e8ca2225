package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agent/pluginwatcher"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/localreg"
	"github.com/plugreg/plugreg/tests/framework/testlog"
	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	nodeID     = "node-1"
	driverName = "gpu.compat.plugreg.io"
	waitFor    = 20 * time.Second // generous: shared machines; nothing asserts speed
)

// stubDriver is a DRA driver that prepares nothing: these tests are about
// registration only.
type stubDriver struct{}

func (stubDriver) PrepareResourceClaims(context.Context, []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return nil, nil
}

func (stubDriver) UnprepareResourceClaims(context.Context, []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return nil, nil
}

func (stubDriver) HandleError(context.Context, error, string) {}

func (stubDriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// storeRegistrar registers into a real single-process registry.
type storeRegistrar struct{ store *localreg.Local }

func (r storeRegistrar) Register(ctx context.Context, info *api.PluginInfo) error {
	_, err := r.store.RegisterPlugin(ctx, info)
	return err
}

func (r storeRegistrar) Deregister(ctx context.Context, info *api.PluginInfo) error {
	cur, _, err := r.store.PluginForAlloc(info.Type, info.Name, info.AllocID)
	if err != nil || cur.NodeID != nodeID {
		return nil
	}
	_, err = r.store.DeregisterPlugin(ctx, info.Type, info.Name, info.AllocID)
	return err
}

type env struct {
	regDir  string // the watcher's Dir, the helper's RegistrarDirectoryPath
	dataDir string // the helper's PluginDataDirectoryPath
	store   *localreg.Local
	w       *pluginwatcher.Watcher
}

// shortDir: unix socket paths are limited to 108 bytes, and t.TempDir's
// carry the test name.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "pk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// makeDirs creates each directory (parents too) and sets it to its path
// with symlinks resolved (the agents log and compare resolved paths; on
// some machines the temp dir is a symlink).
func makeDirs(t *testing.T, dirs ...*string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(*d, 0o755); err != nil {
			t.Fatal(err)
		}
		real, err := filepath.EvalSymlinks(*d)
		if err != nil {
			t.Fatal(err)
		}
		*d = real
	}
}

func newEnv(t *testing.T) *env {
	root := shortDir(t)
	e := &env{regDir: filepath.Join(root, "reg"), dataDir: filepath.Join(root, "data")}
	for _, d := range []string{e.regDir, e.dataDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.store = localreg.New(1024)
	t.Cleanup(e.store.Shutdown)
	var cfg pluginwatcher.Config
	cfg.Dir, cfg.NodeID, cfg.Registrar = e.regDir, nodeID, storeRegistrar{e.store}
	cfg.Logger = testlog.New(t, t.Name(), hclog.Debug)
	cfg.GetInfoTimeout = 2 * time.Second
	cfg.ProbeInterval = 100 * time.Millisecond
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	w, err := pluginwatcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop) // after the helpers stop: cleanups run in reverse
	e.w = w
	return e
}

// helper is a running kubeletplugin.Helper. The helper's registration
// server writes the status it is told without a lock (v0.37.2), so a
// test reading RegistrationStatus() races the watcher's notifications;
// an interceptor serialises every call under mu, and status reads it
// under mu too.
type helper struct {
	*kubeletplugin.Helper
	mu *sync.Mutex
}

func (h helper) status() *registerapi.RegistrationStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.RegistrationStatus()
	if s == nil {
		return nil
	}
	return &registerapi.RegistrationStatus{PluginRegistered: s.PluginRegistered, Error: s.Error}
}

func (e *env) startHelper(t *testing.T, opts ...kubeletplugin.Option) helper {
	t.Helper()
	return startHelper(t, nodeID, e.regDir, e.dataDir, opts...)
}

// startHelper starts the driver's helper on node with its registration
// socket in regDir and its DRA socket in dataDir; t's cleanup stops it.
func startHelper(t *testing.T, node, regDir, dataDir string, opts ...kubeletplugin.Option) helper {
	t.Helper()
	mu := new(sync.Mutex)
	opts = append([]kubeletplugin.Option{
		kubeletplugin.KubeClient(fake.NewClientset()),
		kubeletplugin.NodeName(node),
		kubeletplugin.DriverName(driverName),
		kubeletplugin.RegistrarDirectoryPath(regDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.GRPCInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			return h(ctx, req)
		}),
	}, opts...)
	h, err := kubeletplugin.Start(context.Background(), stubDriver{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return helper{Helper: h, mu: mu}
}

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

// waitRegistered waits until the registry holds exactly one instance of
// the driver, the one at the registration socket sock, and the helper has
// been told it is registered.
func (e *env) waitRegistered(t *testing.T, h helper, sock string) *api.PluginInfo {
	t.Helper()
	var got *api.PluginInfo
	eventually(t, "the driver registered from "+sock, func() (bool, string) {
		l, _ := e.store.Instances(registerapi.DRAPlugin, driverName)
		if len(l) != 1 {
			return false, fmt.Sprintf("%d instances", len(l))
		}
		got = l[0]
		if got.AllocID != pluginwatcher.AllocID(nodeID, sock) {
			return false, "registered from " + got.Options[pluginwatcher.OptionRegistrationSocket]
		}
		if s := h.status(); s == nil || !s.PluginRegistered {
			return false, fmt.Sprintf("helper's RegistrationStatus() = %v", s)
		}
		return true, ""
	})
	return got
}

func (e *env) waitGone(t *testing.T) {
	t.Helper()
	eventually(t, "the driver deregistered", func() (bool, string) {
		l, _ := e.store.Instances(registerapi.DRAPlugin, driverName)
		return len(l) == 0 && len(e.w.Plugins()) == 0, fmt.Sprintf("%d instances", len(l))
	})
}

// The helper, started on the watcher's Dir, is registered as a DRAPlugin
// with its DRA service socket as the endpoint, and is told so; stopped,
// it is deregistered.
func TestHelperRegistersAndDeregisters(t *testing.T) {
	e := newEnv(t)
	h := e.startHelper(t)
	sock := filepath.Join(e.regDir, driverName+"-reg.sock")
	got := e.waitRegistered(t, h, sock)
	if got.NodeID != nodeID || got.ConnectionInfo == nil || got.ConnectionInfo.SocketPath != filepath.Join(e.dataDir, "dra.sock") {
		t.Fatalf("registered %+v %+v", got, got.ConnectionInfo)
	}
	if got.Version != "v1.DRAPlugin" || got.Options[api.OptionSource] != api.SourceKubelet {
		t.Fatalf("registered version %q, options %v", got.Version, got.Options)
	}
	h.Stop()
	e.waitGone(t)
}

// GetInfo failing deregisters the driver (and the helper hears it is not
// registered); once GetInfo answers again it is registered again.
func TestHelperGetInfoError(t *testing.T) {
	e := newEnv(t)
	h := e.startHelper(t)
	sock := filepath.Join(e.regDir, driverName+"-reg.sock")
	e.waitRegistered(t, h, sock)

	h.SetGetInfoError(errors.New("driver unhealthy"))
	e.waitGone(t)
	eventually(t, "the helper told it is not registered", func() (bool, string) {
		s := h.status()
		return s != nil && !s.PluginRegistered, fmt.Sprintf("%v", s)
	})

	h.SetGetInfoError(nil)
	e.waitRegistered(t, h, sock)
}

// Rolling update: two instances of the driver (unique socket names, as
// the helper makes them with RollingUpdate); the newest is the one
// registered, stopping the old one changes nothing, and at the end exactly
// the newest is registered.
func TestHelperRollingUpdate(t *testing.T) {
	e := newEnv(t)
	old := e.startHelper(t, kubeletplugin.RollingUpdate("uid-old"))
	oldSock := filepath.Join(e.regDir, kubeletplugin.RollingUpdateRegistrarSocketFile(e.regDir, driverName, "uid-old"))
	e.waitRegistered(t, old, oldSock)

	// The socket's mtime orders instances; make sure the new one's is later.
	time.Sleep(10 * time.Millisecond)
	newer := e.startHelper(t, kubeletplugin.RollingUpdate("uid-new"))
	newSock := filepath.Join(e.regDir, kubeletplugin.RollingUpdateRegistrarSocketFile(e.regDir, driverName, "uid-new"))
	got := e.waitRegistered(t, newer, newSock)
	if got.ConnectionInfo.SocketPath != filepath.Join(e.dataDir, "dra-uid-new.sock") {
		t.Fatalf("endpoint %q", got.ConnectionInfo.SocketPath)
	}

	old.Stop()
	if _, err := os.Stat(oldSock); !os.IsNotExist(err) {
		t.Fatalf("old registration socket still there: %v", err)
	}
	// Let the watcher see the removal and probe a few rounds.
	time.Sleep(500 * time.Millisecond)
	e.waitRegistered(t, newer, newSock)
	if l := e.w.Plugins(); len(l) != 1 || l[0].AllocID != pluginwatcher.AllocID(nodeID, newSock) {
		t.Fatalf("Plugins() = %v", l)
	}
}
