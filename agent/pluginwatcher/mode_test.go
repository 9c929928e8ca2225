package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/api"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"", ModeAuto, true},
		{"auto", ModeAuto, true},
		{"shared", ModeShared, true},
		{"owned", ModeOwned, true},
		{"Shared", "", false},
		{"kubelet", "", false},
		{" owned", "", false},
	} {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			got, err := ParseMode(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("ParseMode(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "auto, shared or owned")) {
				t.Fatalf("error %v: want ErrConfig listing the modes", err)
			}
		})
	}
}

// ModeAuto is shared for kubelet's dir, under its own name or behind a
// symbolic link (either way round), and owned for any other; an explicit
// mode is kept.
func TestModeResolve(t *testing.T) {
	const kubelet = "/var/lib/kubelet/plugins_registry"
	for _, tc := range []struct {
		name            string
		mode            Mode
		given, resolved string
		want            Mode
	}{
		{"kubelet's dir", "", kubelet, kubelet, ModeShared},
		{"kubelet's dir, auto, trailing slash", ModeAuto, kubelet + "/", kubelet, ModeShared},
		{"kubelet's root dir behind a link", "", kubelet, "/data/kubelet/plugins_registry", ModeShared},
		{"a link to kubelet's dir", "", "/etc/plugreg/kubelet-plugins", kubelet, ModeShared},
		{"another dir", "", "/var/lib/plugreg/plugins", "/var/lib/plugreg/plugins", ModeOwned},
		{"a name that only starts like it", ModeAuto, "/srv/plugins_registry_old", "/srv/plugins_registry_old", ModeOwned},
		{"owned says owned, even for kubelet's dir", ModeOwned, kubelet, kubelet, ModeOwned},
		{"shared says shared, for any dir", ModeShared, "/var/lib/plugreg/plugins", "/var/lib/plugreg/plugins", ModeShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolveMode(tc.mode, tc.given, tc.resolved); got != tc.want {
				t.Fatalf("resolveMode(%q, %s, %s) = %q, want %q", tc.mode, tc.given, tc.resolved, got, tc.want)
			}
		})
	}
}

// New resolves the mode on the real dir, and refuses one it does not know.
func TestNewResolvesTheMode(t *testing.T) {
	root := shortDir(t)
	kubelet := filepath.Join(root, KubeletDirName)
	if err := os.Mkdir(kubelet, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		mode Mode
		want Mode
	}{
		{kubelet, "", ModeShared},
		{root, "", ModeOwned},
		{kubelet, ModeOwned, ModeOwned},
	} {
		cfg := testConfig(t, tc.dir, newStoreRegistrar(t, testNode))
		cfg.Mode = tc.mode
		w, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if w.Mode() != tc.want {
			t.Errorf("New(%s, %q).Mode() = %q, want %q", tc.dir, tc.mode, w.Mode(), tc.want)
		}
	}
	cfg := testConfig(t, root, newStoreRegistrar(t, testNode))
	cfg.Mode = "kubelet"
	if _, err := New(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `Mode "kubelet"`) {
		t.Fatalf("New with Mode kubelet = %v, want ErrConfig naming it", err)
	}
}

// In a dir shared with kubelet, plugreg never calls
// NotifyRegistrationStatus, whatever happens: its writes fail for want of
// a leader, then are refused, then succeed (the plugin is registered,
// retried with backoff meanwhile); another plugin is refused by
// validation; another's GetInfo fails; the registered one goes away.
// kubelet answers these plugins; a "false" from plugreg would make CSI's
// node-driver-registrar exit (kubernetes/kubernetes#69992).
func TestSharedNeverNotifies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    Mode
		subdir  string // the plugins dir, below the fixture's
		wantRun Mode
	}{
		{"explicit shared", ModeShared, "", ModeShared},
		{"auto in kubelet's dir", "", KubeletDirName, ModeShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			if tc.subdir != "" {
				f.dir = filepath.Join(f.dir, tc.subdir)
				if err := os.Mkdir(f.dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			f.reg.failRegistersWith(1<<20, api.NewError(api.CodeNoLeader, errors.New("no leader")))
			w := f.start(t, func(c *Config) { c.Mode = tc.mode })
			if w.Mode() != tc.wantRun {
				t.Fatalf("Mode() = %q, want %q", w.Mode(), tc.wantRun)
			}
			good := startPlugin(t, filepath.Join(f.dir, "good.sock"), draInfo("good.example.com"))
			bad := startPlugin(t, filepath.Join(f.dir, "bad.sock"), &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "Bad_Name", SupportedVersions: []string{"v1.DRAPlugin"}})
			sick := startPlugin(t, filepath.Join(f.dir, "sick.sock"), draInfo("sick.example.com"))
			sick.setErr(errors.New("not ready"))
			plugins := []*fakePlugin{good, bad, sick}

			eventually(t, "three failed Registers (no leader), and the others asked again", func() (bool, string) {
				return f.reg.registers.Load() >= 3 && bad.calls() >= 3 && sick.calls() >= 3,
					fmt.Sprintf("%d Registers", f.reg.registers.Load())
			})
			registers := f.reg.registers.Load()
			f.reg.failRegistersWith(2, fmt.Errorf("not this agent's type: %w", api.ErrPermissionDenied))
			eventually(t, "two refused Registers", func() (bool, string) { return f.reg.registers.Load() >= registers+2, "" })
			f.waitRegistered(t, registerapi.DRAPlugin, "good.example.com", good.path)
			before := good.calls()
			eventually(t, "more probes of the registered plugin", func() (bool, string) { return good.calls() >= before+3, "" })
			good.stop()
			f.waitGone(t, registerapi.DRAPlugin, "good.example.com")

			for _, p := range plugins {
				if n := p.notifyCalls(); n != 0 {
					t.Errorf("%s: %d NotifyRegistrationStatus calls in a shared dir (last: %s)", p.path, n, p.statusString())
				}
			}
		})
	}
}

// In a dir plugreg owns, its own failures (availability: no leader, no
// server, a timeout, shutdown; errors with no refusal in them) are never
// told to the plugin: plugreg retries until the Register succeeds, then
// tells it "registered".
func TestOwnedNeverToldFalseForPlugregsFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"no leader", api.NewError(api.CodeNoLeader, errors.New("no leader"))},
		{"not leader", api.NewError(api.CodeNotLeader, errors.New("not the leader"))},
		{"enqueue timeout", api.NewError(api.CodeEnqueueTimeout, errors.New("raft busy"))},
		{"no server", api.NewError(api.CodeNoServer, errors.New("no live server"))},
		{"timeout", api.NewError(api.CodeTimeout, errors.New("commit not seen"))},
		{"leadership lost", api.NewError(api.CodeLeadershipLost, errors.New("deposed"))},
		{"shutdown", api.NewError(api.CodeShutdown, errors.New("server stopping"))},
		{"forward failed", api.NewError(api.CodeForwardFailed, errors.New("leader unreachable"))},
		{"no leader, over the wire", (&api.WireError{Code: api.CodeNoLeader, Msg: "no leader"}).Err()},
		{"too many requests", fmt.Errorf("agent limit: %w", api.ErrTooManyRequests)},
		{"unknown command (servers being upgraded)", fmt.Errorf("leader: %w", api.ErrUnknownCommand)},
		{"agent token unknown to the servers", fmt.Errorf("agent token: %w", api.ErrACLNotFound)},
		{"the agent's write timeout", fmt.Errorf("agent write: %w", context.DeadlineExceeded)},
		{"unclassified", errToldToFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.reg.failRegistersWith(3, tc.err)
			w := f.start(t, func(c *Config) { c.Mode = ModeOwned })
			if w.Mode() != ModeOwned {
				t.Fatalf("Mode() = %q", w.Mode())
			}
			p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo("retry.example.com"))
			f.waitRegistered(t, registerapi.DRAPlugin, "retry.example.com", p.path)
			if s := waitStatus(t, p, true); s.Error != "" {
				t.Fatalf("status error %q", s.Error)
			}
			if n := f.reg.registers.Load(); n < 4 {
				t.Fatalf("%d Register calls, want 3 failed and 1 that succeeded", n)
			}
			if told := p.toldFalse(); len(told) > 0 {
				t.Fatalf("told %d times it is not registered for plugreg's own failure: %v", len(told), told[0])
			}
		})
	}
}

// In a dir plugreg owns, a Register that refuses the plugin itself is
// told, with the reason; once the refusal is lifted, it is registered and
// told so. (A refusal by validation, before any Register, is TestRefused.)
func TestOwnedToldFalseForARefusal(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // in the notice's Error
	}{
		{"invalid", fmt.Errorf("endpoint: %w: not absolute", api.ErrInvalid), "not absolute"},
		{"invalid, over the wire", (&api.WireError{Code: api.CodeInvalid, Msg: "plugreg: invalid request: name reserved"}).Err(), "name reserved"},
		{"too large", fmt.Errorf("%w: options of 300 KiB", api.ErrTooLarge), "300 KiB"},
		{"permission denied for its type", fmt.Errorf("DRAPlugin: %w", api.ErrPermissionDenied), "permission denied"},
		{"invalid, as a coded error", api.NewError(api.CodeInvalid, errors.New("bad version")), "bad version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.reg.failRegistersWith(2, tc.err)
			f.start(t, func(c *Config) { c.Mode = ModeOwned })
			p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo("refused.example.com"))
			eventually(t, "the plugin told it is not registered", func() (bool, string) {
				return len(p.toldFalse()) > 0, p.statusString()
			})
			if s := p.toldFalse()[0]; !strings.Contains(s.Error, tc.want) {
				t.Fatalf("told %q, want it to say %q", s.Error, tc.want)
			}
			f.waitRegistered(t, registerapi.DRAPlugin, "refused.example.com", p.path)
			waitStatus(t, p, true)
		})
	}
}
