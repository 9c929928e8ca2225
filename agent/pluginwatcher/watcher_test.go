package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestNewRefusesBadDir(t *testing.T) {
	dir := shortDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable")
	if err := os.Mkdir(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		rootSkip  bool
	}{
		{"missing", filepath.Join(dir, "missing"), false},
		{"not a directory", file, false},
		{"unreadable", unreadable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootSkip && os.Geteuid() == 0 {
				t.Skip("root reads any directory; run as another user to test this")
			}
			_, err := New(testConfig(t, tc.dir, newStoreRegistrar(t, testNode)))
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.dir) {
				t.Fatalf("New(%s) = %v, want ErrConfig naming the path", tc.dir, err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	reg := newStoreRegistrar(t, testNode)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"defaults with the required fields", func(*Config) {}, true},
		{"zero optional fields", func(c *Config) { *c = Config{Dir: c.Dir, NodeID: c.NodeID, Registrar: c.Registrar} }, true},
		{"no Dir", func(c *Config) { c.Dir = "" }, false},
		{"no NodeID", func(c *Config) { c.NodeID = "" }, false},
		{"no Registrar", func(c *Config) { c.Registrar = nil }, false},
		{"negative timeout", func(c *Config) { c.GetInfoTimeout = -1 }, false},
		{"RetryMax below RetryMin", func(c *Config) { c.RetryMin, c.RetryMax = time.Second, time.Millisecond }, false},
		{"nil handler", func(c *Config) { c.Handlers = map[string]Handler{"x": nil} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg Config
			cfg.Dir, cfg.NodeID, cfg.Registrar = "/x", "n", reg
			tc.mod(&cfg)
			if err := cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestAllocIDStable(t *testing.T) {
	a := AllocID("n1", "/var/lib/kubelet/plugins_registry/x.sock")
	if a != AllocID("n1", "/var/lib/kubelet/plugins_registry/x.sock") || !strings.HasPrefix(a, "k-") || len(a) != 18 {
		t.Fatalf("AllocID = %q", a)
	}
	if a == AllocID("n2", "/var/lib/kubelet/plugins_registry/x.sock") || a == AllocID("n1", "/var/lib/kubelet/plugins_registry/y.sock") {
		t.Fatal("AllocID ignores the node or the path")
	}
}

// Each kind of plugin is discovered, registered with the right fields and
// told so; once its socket is removed it is deregistered. Half the sockets
// are there before Start (the initial walk), half come after (fsnotify).
func TestRegisterAndDeregister(t *testing.T) {
	f := newFixture(t)
	type kind struct {
		name        string
		info        *registerapi.PluginInfo
		endpoint    string // expected ConnectionInfo.SocketPath; "" = the registration socket
		wantVersion string
		before      bool
	}
	kinds := []kind{
		{"csi", &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "ebs.csi.aws.com", Endpoint: "/var/lib/kubelet/plugins/ebs/csi.sock", SupportedVersions: []string{"1.0.0", "2.0.0"}}, "/var/lib/kubelet/plugins/ebs/csi.sock", "1.0.0", true},
		{"dra", draInfo("gpu.example.com"), "", "v1.DRAPlugin", false},
		{"device", &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: "example.com-gpu", SupportedVersions: []string{"v1beta1"}}, "", "v1beta1", true},
		{"generic", &registerapi.PluginInfo{Type: "Widget", Name: "w1", SupportedVersions: []string{"3"}}, "", "3", false},
	}
	plugins := map[string]*fakePlugin{}
	for _, k := range kinds {
		if k.before {
			plugins[k.name] = startPlugin(t, filepath.Join(f.dir, k.name+".sock"), k.info)
		}
	}
	f.start(t)
	for _, k := range kinds {
		if !k.before {
			plugins[k.name] = startPlugin(t, filepath.Join(f.dir, k.name+".sock"), k.info)
		}
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			p := plugins[k.name]
			got := f.waitRegistered(t, k.info.Type, k.info.Name, p.path)
			endpoint := k.endpoint
			if endpoint == "" {
				endpoint = p.path
			}
			want := &api.PluginInfo{
				Type: k.info.Type, Name: k.info.Name, AllocID: AllocID(testNode, p.path),
				Version: k.wantVersion, NodeID: testNode,
				ConnectionInfo: &api.ConnectionInfo{SocketPath: endpoint},
				Options: map[string]string{
					OptionVersions:           strings.Join(k.info.SupportedVersions, ","),
					OptionRegistrationSocket: p.path,
					api.OptionSource:         api.SourceKubelet,
				},
			}
			if !infoEqual(got, want) {
				t.Fatalf("registered\n %+v %+v\nwant\n %+v %+v", got, got.ConnectionInfo, want, want.ConnectionInfo)
			}
			if s := waitStatus(t, p, true); s.Error != "" {
				t.Fatalf("status error %q", s.Error)
			}
			p.stop() // removes the socket
			f.waitGone(t, k.info.Type, k.info.Name)
		})
	}
}

// A plugin that answers but is refused is told why, and nothing reaches
// the Registrar; it is asked again later (from scratch).
func TestRefused(t *testing.T) {
	long := strings.Repeat("n", api.MaxFieldBytes+1)
	for _, tc := range []struct {
		name string
		info *registerapi.PluginInfo
		err  error // GetInfo's error
		want string
	}{
		{"GetInfo error", nil, errors.New("not ready"), "not ready"},
		{"empty name", &registerapi.PluginInfo{Type: "Widget"}, nil, "name is empty"},
		{"name with a slash", &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: "example.com/gpu", SupportedVersions: []string{"v1beta1"}}, nil, "contains '/'"},
		{"oversize name", &registerapi.PluginInfo{Type: "Widget", Name: long}, nil, "at most 256"},
		{"control character in type", &registerapi.PluginInfo{Type: "Wid\x01get", Name: "w"}, nil, "control character"},
		{"CSI 2.x only", &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "c", SupportedVersions: []string{"2.0.0"}}, nil, "none of the versions"},
		{"CSI 0.x only", &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "c", SupportedVersions: []string{"0.3.0"}}, nil, "must be 1.x"},
		{"CSI no versions", &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "c"}, nil, "no supported versions"},
		{"DRA unknown service", &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "d.example.com", SupportedVersions: []string{"v9.DRAPlugin"}}, nil, "none of the services"},
		{"DRA bad driver name", &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "Bad_Name", SupportedVersions: []string{"v1.DRAPlugin"}}, nil, "RFC 1123"},
		{"device plugin old version", &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: "gpu", SupportedVersions: []string{"v1alpha"}}, nil, "none of the versions"},
		{"oversize endpoint", &registerapi.PluginInfo{Type: "Widget", Name: "w", Endpoint: strings.Repeat("e", api.MaxPluginBytes)}, nil, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.start(t)
			p := startPlugin(t, filepath.Join(f.dir, "p.sock"), tc.info)
			p.setErr(tc.err)
			s := waitStatus(t, p, false)
			if !strings.Contains(s.Error, tc.want) {
				t.Fatalf("status error %q, want it to say %q", s.Error, tc.want)
			}
			eventually(t, "a retry", func() (bool, string) { return p.calls() >= 2, "" })
			if n := f.reg.registers.Load(); n != 0 {
				t.Fatalf("%d Register calls for a refused plugin", n)
			}
			if l := f.w.Plugins(); len(l) != 0 {
				t.Fatalf("Plugins() = %v", l)
			}
		})
	}
}

// Sockets that never answer usefully: nothing reaches the Registrar, and
// the watcher keeps trying with backoff.
func TestUnanswered(t *testing.T) {
	t.Run("hangs in GetInfo", func(t *testing.T) {
		f := newFixture(t)
		f.start(t, func(c *Config) { c.GetInfoTimeout = 200 * time.Millisecond })
		// Hanging before its socket exists: a probe that beat a later
		// setHang registered it (seen on a busy machine).
		p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo("d.example.com"), func(p *fakePlugin) { p.setHang(true) })
		eventually(t, "GetInfo asked again after a timeout", func() (bool, string) { return p.calls() >= 3, "" })
		if n := f.reg.registers.Load(); n != 0 {
			t.Fatalf("%d Register calls for a hung plugin", n)
		}
	})
	t.Run("answers garbage", func(t *testing.T) {
		f := newFixture(t)
		f.start(t)
		l, err := net.Listen("unix", filepath.Join(f.dir, "junk.sock"))
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan struct{}, 100)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("HTTP/1.0 400 garbage garbage garbage\r\n\r\n"))
				c.Close()
				accepted <- struct{}{}
			}
		}()
		t.Cleanup(func() { l.Close(); <-done })
		for range 3 {
			select {
			case <-accepted:
			case <-time.After(waitFor):
				t.Fatal("the watcher did not connect three times")
			}
		}
		if n := f.reg.registers.Load(); n != 0 {
			t.Fatalf("%d Register calls for a garbage socket", n)
		}
	})
}

// Only sockets count, in Dir and in subdirectories made later; dot-files,
// dot-directories, regular files and symbolic links are ignored, and a
// symbolic link loop does no harm.
func TestDiscovery(t *testing.T) {
	f := newFixture(t)
	mustMkdir := func(p string) {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Before Start: a loop, a hidden dir with a socket, a regular file.
	if err := os.Symlink(f.dir, filepath.Join(f.dir, "loop")); err != nil {
		t.Fatal(err)
	}
	mustMkdir(filepath.Join(f.dir, ".hidden"))
	hiddenDir := startPlugin(t, filepath.Join(f.dir, ".hidden", "h.sock"), draInfo("hidden-dir.example.com"))
	if err := os.WriteFile(filepath.Join(f.dir, "notes.sock"), []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.start(t)

	dotFile := startPlugin(t, filepath.Join(f.dir, ".dot.sock"), draInfo("dot-file.example.com"))
	mustMkdir(filepath.Join(f.dir, "a", "b"))
	deep := startPlugin(t, filepath.Join(f.dir, "a", "b", "deep.sock"), draInfo("deep.example.com"))
	mustMkdir(filepath.Join(f.dir, "later"))
	later := startPlugin(t, filepath.Join(f.dir, "later", "l.sock"), draInfo("later.example.com"))
	if err := os.Symlink(later.path, filepath.Join(f.dir, "link.sock")); err != nil {
		t.Fatal(err)
	}

	f.waitRegistered(t, registerapi.DRAPlugin, "deep.example.com", deep.path)
	f.waitRegistered(t, registerapi.DRAPlugin, "later.example.com", later.path)
	// A socket made after those is registered too, so the ignored ones
	// had their chance before it.
	last := startPlugin(t, filepath.Join(f.dir, "last.sock"), draInfo("last.example.com"))
	f.waitRegistered(t, registerapi.DRAPlugin, "last.example.com", last.path)
	if l := f.w.Plugins(); len(l) != 3 {
		t.Fatalf("Plugins() has %d entries, want 3: %v", len(l), l)
	}
	for _, p := range []*fakePlugin{hiddenDir, dotFile} {
		if p.calls() != 0 {
			t.Fatalf("hidden socket %s was asked GetInfo", p.path)
		}
	}
	if l := f.reg.instances(registerapi.DRAPlugin, "later.example.com"); len(l) != 1 {
		t.Fatalf("the symlink was registered too: %d instances", len(l))
	}

	// Removing a whole subdirectory deregisters what was in it.
	if err := os.RemoveAll(filepath.Join(f.dir, "a")); err != nil {
		t.Fatal(err)
	}
	f.waitGone(t, registerapi.DRAPlugin, "deep.example.com")
}

// A registered plugin that stops answering GetInfo is deregistered, and
// registered again once it answers.
func TestProbe(t *testing.T) {
	for _, mode := range []string{"hang", "error"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			f.start(t, func(c *Config) { c.GetInfoTimeout = 300 * time.Millisecond })
			p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo("probe.example.com"))
			f.waitRegistered(t, registerapi.DRAPlugin, "probe.example.com", p.path)
			waitStatus(t, p, true)
			if mode == "hang" {
				p.setHang(true)
			} else {
				p.setErr(errors.New("sick"))
			}
			f.waitGone(t, registerapi.DRAPlugin, "probe.example.com")
			p.setHang(false)
			p.setErr(nil)
			f.waitRegistered(t, registerapi.DRAPlugin, "probe.example.com", p.path)
			waitStatus(t, p, true)
		})
	}
}

// Two sockets of one name: the newest is the one registered; removing an
// older one changes nothing; removing the newest deregisters the name.
func TestNewestSocketWins(t *testing.T) {
	f := newFixture(t)
	f.start(t)
	const name = "rolling.example.com"
	old := startPlugin(t, filepath.Join(f.dir, "old.sock"), draInfo(name))
	f.waitRegistered(t, registerapi.DRAPlugin, name, old.path)
	waitStatus(t, old, true)

	newer := startPlugin(t, filepath.Join(f.dir, "new.sock"), draInfo(name))
	f.waitRegistered(t, registerapi.DRAPlugin, name, newer.path)
	waitStatus(t, newer, true)
	eventually(t, "the replaced instance deregistered", func() (bool, string) {
		return len(f.reg.instances(registerapi.DRAPlugin, name)) == 1, "two instances"
	})

	old.stop()
	// Give the watcher several probe rounds to do something wrong.
	before := newer.calls()
	eventually(t, "more probes", func() (bool, string) { return newer.calls() >= before+3, "" })
	l := f.reg.instances(registerapi.DRAPlugin, name)
	if len(l) != 1 || l[0].AllocID != AllocID(testNode, newer.path) {
		t.Fatalf("after removing the old socket: %v", l)
	}

	newer.stop()
	f.waitGone(t, registerapi.DRAPlugin, name)
}

// Sockets of one name present before Start: the one created last wins,
// whatever the walk's order.
func TestNewestSocketWinsAtStart(t *testing.T) {
	f := newFixture(t)
	const name = "start.example.com"
	// "z" is created first, "a" later: the walk sees "a" first.
	z := startPlugin(t, filepath.Join(f.dir, "z.sock"), draInfo(name))
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(z.path, past, past); err != nil {
		t.Fatal(err)
	}
	a := startPlugin(t, filepath.Join(f.dir, "a.sock"), draInfo(name))
	f.start(t)
	f.waitRegistered(t, registerapi.DRAPlugin, name, a.path)
	before := a.calls()
	eventually(t, "more probes", func() (bool, string) { return a.calls() >= before+3, "" })
	if s := z.lastStatus(); s != nil {
		t.Fatalf("the older socket was told %v", s)
	}
	if l := f.reg.instances(registerapi.DRAPlugin, name); len(l) != 1 {
		t.Fatalf("%d instances, want only the newest", len(l))
	}
}

// A plugin restarted on the same path is told again; the registry keeps
// one instance (same AllocID).
func TestRestartedPlugin(t *testing.T) {
	f := newFixture(t)
	f.start(t)
	path := filepath.Join(f.dir, "p.sock")
	p := startPlugin(t, path, draInfo("restart.example.com"))
	f.waitRegistered(t, registerapi.DRAPlugin, "restart.example.com", path)
	waitStatus(t, p, true)
	p.stop()
	p2 := startPlugin(t, path, draInfo("restart.example.com"))
	waitStatus(t, p2, true)
	f.waitRegistered(t, registerapi.DRAPlugin, "restart.example.com", path)
	if l := f.reg.instances(registerapi.DRAPlugin, "restart.example.com"); len(l) != 1 {
		t.Fatalf("%d instances", len(l))
	}
}

// A Registrar that refuses the plugin (its type not this agent's to
// register, until an operator grants it): the plugin is told why, and the
// registration is retried from scratch until it succeeds; a failed
// Deregister is retried too.
func TestRegistrarFailures(t *testing.T) {
	f := newFixture(t)
	f.reg.failRegistersWith(3, fmt.Errorf("the agent token may not register DRAPlugin: %w", api.ErrPermissionDenied))
	f.reg.failDeregister.Store(2)
	f.start(t)
	p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo("retry.example.com"))
	s := waitStatus(t, p, false)
	if !strings.Contains(s.Error, "may not register DRAPlugin") {
		t.Fatalf("status error %q", s.Error)
	}
	f.waitRegistered(t, registerapi.DRAPlugin, "retry.example.com", p.path)
	waitStatus(t, p, true)
	if n := f.reg.registers.Load(); n < 4 {
		t.Fatalf("%d Register calls, want at least 4", n)
	}
	if n := p.calls(); n < 4 {
		t.Fatalf("%d GetInfo calls, want one per attempt (at least 4)", n)
	}
	p.stop()
	f.waitGone(t, registerapi.DRAPlugin, "retry.example.com")
	if n := f.reg.deregisters.Load(); n < 3 {
		t.Fatalf("%d Deregister calls, want at least 3", n)
	}
}

// A socket removed while its Register runs is deregistered after the
// Register, never during it (the registrar fails the test on overlap).
func TestRemovedDuringRegister(t *testing.T) {
	f := newFixture(t)
	f.reg.registerDelay.Store(int64(300 * time.Millisecond))
	f.start(t)
	p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo("slow.example.com"))
	eventually(t, "Register called", func() (bool, string) { return f.reg.registers.Load() > 0, "" })
	p.stop()
	eventually(t, "deregistered", func() (bool, string) {
		return f.reg.deregisters.Load() > 0 && len(f.reg.instances(registerapi.DRAPlugin, "slow.example.com")) == 0, ""
	})
	f.waitGone(t, registerapi.DRAPlugin, "slow.example.com")
}

// Stop returns while a plugin hangs in GetInfo with a long timeout, and
// leaves no goroutine behind (TestMain's goleak checks).
func TestStopWhilePluginHangs(t *testing.T) {
	f := newFixture(t)
	w := f.start(t, func(c *Config) { c.GetInfoTimeout = time.Hour })
	p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo("hang.example.com"))
	p.setHang(true)
	eventually(t, "GetInfo entered", func() (bool, string) { return p.calls() > 0, "" })
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(waitFor):
		t.Fatal("Stop did not return while a plugin hangs")
	}
	w.Stop() // idempotent
	if err := w.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v", err)
	}
	if err := w.Wait(context.Background(), func([]*api.PluginInfo) bool { return false }); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait after Stop = %v", err)
	}
}

func TestStartTwice(t *testing.T) {
	f := newFixture(t)
	w := f.start(t)
	if err := w.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}
}

// Wait sees a registration; when Start's ctx ends the watcher stops and
// Wait says so.
func TestWaitAndStartContext(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := testConfig(t, f.dir, f.reg)
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo("wait.example.com"))
	wctx, wcancel := context.WithTimeout(context.Background(), waitFor)
	defer wcancel()
	if err := w.Wait(wctx, func(l []*api.PluginInfo) bool { return len(l) == 1 && l[0].Name == "wait.example.com" }); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := w.Wait(wctx, func([]*api.PluginInfo) bool { return false }); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait after Start's ctx ended = %v", err)
	}
}

// The newest socket of a name goes away while an older one still
// answers: the older one is registered again, then the newest's instance
// removed.
func TestNewestGoneOlderTakesOver(t *testing.T) {
	f := newFixture(t)
	f.start(t)
	const name = "takeover.example.com"
	old := startPlugin(t, filepath.Join(f.dir, "old.sock"), draInfo(name))
	f.waitRegistered(t, registerapi.DRAPlugin, name, old.path)
	newer := startPlugin(t, filepath.Join(f.dir, "new.sock"), draInfo(name))
	f.waitRegistered(t, registerapi.DRAPlugin, name, newer.path)
	newer.stop()
	f.waitRegistered(t, registerapi.DRAPlugin, name, old.path)
	eventually(t, "one instance left", func() (bool, string) {
		return len(f.reg.instances(registerapi.DRAPlugin, name)) == 1, "more"
	})
}
