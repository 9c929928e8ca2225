package pluginwatcher

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// While the cluster cannot be written (Register and Deregister fail), a
// plugin restarted on its path is the same instance (same AllocID): once
// the writes succeed again it is registered, and the Deregister of its
// old incarnation, still pending, does not remove it after the fact.
func TestRestartedWhileWritesFail(t *testing.T) {
	f := newFixture(t)
	f.start(t)
	const name = "again.example.com"
	path := filepath.Join(f.dir, "p.sock")
	p := startPlugin(t, path, draInfo(name))
	f.waitRegistered(t, registerapi.DRAPlugin, name, path)

	f.reg.failDeregister.Store(1 << 20)
	f.reg.failRegistersWith(1<<20, api.NewError(api.CodeNoLeader, errToldToFail))
	p.stop()
	eventually(t, "the old incarnation's Deregister tried", func() (bool, string) { return f.reg.deregisters.Load() > 0, "" })
	registers := f.reg.registers.Load()
	p2 := startPlugin(t, path, draInfo(name))
	eventually(t, "the new incarnation's Register tried", func() (bool, string) { return f.reg.registers.Load() > registers+1, "" })

	// The cluster is back for registrations first, then for the rest.
	f.reg.failRegister.Store(0)
	registers = f.reg.registers.Load()
	eventually(t, "the new incarnation registered", func() (bool, string) { return f.reg.registers.Load() > registers, "" })
	f.reg.failDeregister.Store(0)
	before := p2.calls()
	eventually(t, "more probes", func() (bool, string) { return p2.calls() >= before+10, "" })
	f.waitRegistered(t, registerapi.DRAPlugin, name, path)
	waitStatus(t, p2, true)
}

// A plugin whose Register failed may be registered all the same (the
// write applied but its answer was lost; the agent's Host writes what it
// was asked once the cluster is back): if the plugin goes away before a
// Register succeeds, it is deregistered, not left behind.
func TestGoneBeforeItsRegisterSucceeded(t *testing.T) {
	f := newFixture(t)
	f.reg.applyThenFail.Store(true)
	f.reg.failRegistersWith(1<<20, api.NewError(api.CodeTimeout, errToldToFail))
	f.start(t)
	const name = "ghost.example.com"
	p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo(name))
	eventually(t, "a Register applied but failed", func() (bool, string) {
		return f.reg.registers.Load() > 0 && len(f.reg.instances(registerapi.DRAPlugin, name)) == 1, ""
	})
	p.stop()
	f.waitGone(t, registerapi.DRAPlugin, name)
	// And it stays gone: the watcher registers it no more.
	registers := f.reg.registers.Load()
	time.Sleep(300 * time.Millisecond)
	if n := f.reg.registers.Load(); n != registers {
		t.Fatalf("%d more Register calls after the plugin went", n-registers)
	}
	if l := f.reg.instances(registerapi.DRAPlugin, name); len(l) != 0 {
		t.Fatalf("%d instances after the plugin went", len(l))
	}
}

// A registered plugin whose answer changed, while the cluster cannot be
// written: the new Register fails, and the registration it has stays (no
// Deregister) until the new one succeeds. It answered: only plugreg's
// write failed.
func TestChangedWhileWritesFailKeepsItsRegistration(t *testing.T) {
	f := newFixture(t)
	f.start(t)
	const name = "changed.example.com"
	p := startPlugin(t, filepath.Join(f.dir, "p.sock"), draInfo(name))
	f.waitRegistered(t, registerapi.DRAPlugin, name, p.path)

	f.reg.failRegistersWith(1<<20, api.NewError(api.CodeNoServer, errToldToFail))
	registers := f.reg.registers.Load()
	p.setInfo(&registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: name, SupportedVersions: []string{"v1beta1.DRAPlugin"}})
	eventually(t, "the changed answer's Register tried and failed three times", func() (bool, string) {
		return f.reg.registers.Load() >= registers+3, ""
	})
	if n := f.reg.deregisters.Load(); n != 0 {
		t.Fatalf("%d Deregister calls while the plugin answered", n)
	}
	if l := f.reg.instances(registerapi.DRAPlugin, name); len(l) != 1 || l[0].Version != "v1.DRAPlugin" {
		t.Fatalf("registry: %v, want the registration it had", l)
	}

	f.reg.failRegister.Store(0)
	eventually(t, "the changed answer registered", func() (bool, string) {
		l := f.reg.instances(registerapi.DRAPlugin, name)
		return len(l) == 1 && l[0].Version == "v1beta1.DRAPlugin", "not yet"
	})
	if n := f.reg.deregisters.Load(); n != 0 {
		t.Fatalf("%d Deregister calls", n)
	}
}
