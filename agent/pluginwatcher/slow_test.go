package pluginwatcher

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// A registered plugin that is slow (it accepts connections but lets GetInfo
// time out) keeps its registration for SlowProbes probes; one that is dead
// (its socket file is left but nothing accepts) loses it at once, however
// many slow probes are allowed.
func TestSlowIsNotDead(t *testing.T) {
	t.Run("slow stays registered", func(t *testing.T) {
		f := newFixture(t)
		f.start(t, func(c *Config) { c.GetInfoTimeout = 100 * time.Millisecond; c.SlowProbes = 1000 })
		p := startPlugin(t, filepath.Join(f.dir, "slow.sock"), draInfo("slow.example.com"))
		f.waitRegistered(t, registerapi.DRAPlugin, "slow.example.com", p.path)
		p.setHang(true)
		before := p.calls()
		eventually(t, "several timed-out probes", func() (bool, string) { return p.calls() >= before+5, "" })
		if len(f.reg.instances(registerapi.DRAPlugin, "slow.example.com")) != 1 {
			t.Fatal("a slow plugin was deregistered")
		}
		// Counted for metrics: every timed-out probe is a failed and a
		// slow one (counted once it has timed out).
		eventually(t, "5 slow probes counted", func() (bool, string) {
			st := f.w.Stats()
			return st.Slow >= 5 && st.Failed >= st.Slow && st.Probes >= st.Failed+1, fmt.Sprintf("%+v", st)
		})
		p.setHang(false)
	})
	t.Run("slow is suspect until it answers again", func(t *testing.T) {
		f := newFixture(t)
		f.start(t, func(c *Config) { c.GetInfoTimeout = 100 * time.Millisecond; c.SlowProbes = 1000 })
		p := startPlugin(t, filepath.Join(f.dir, "slow.sock"), draInfo("slow.example.com"))
		first := f.waitRegistered(t, registerapi.DRAPlugin, "slow.example.com", p.path)
		if first.Health != nil {
			t.Fatalf("registered with health %+v", first.Health)
		}
		p.setHang(true)
		var marked *api.PluginInfo
		eventually(t, "the instance marked suspect by its probes", func() (bool, string) {
			l := f.reg.instances(registerapi.DRAPlugin, "slow.example.com")
			if len(l) != 1 || !l[0].Suspect() {
				return false, fmt.Sprintf("%d instances", len(l))
			}
			marked = l[0]
			return true, ""
		})
		if h := marked.Health; h.Check != api.CheckProbe || h.Reason == "" || h.LastSeen.IsZero() || h.LastSeen.After(time.Now()) {
			t.Fatalf("health %+v", h)
		}
		if marked.AllocID != first.AllocID || marked.CreateIndex != first.CreateIndex {
			t.Fatalf("marking suspect registered anew: %+v, was %+v", marked, first)
		}
		p.setHang(false)
		eventually(t, "the instance passing again", func() (bool, string) {
			l := f.reg.instances(registerapi.DRAPlugin, "slow.example.com")
			return len(l) == 1 && l[0].Health == nil, ""
		})
	})
	t.Run("dead is deregistered", func(t *testing.T) {
		f := newFixture(t)
		f.start(t, func(c *Config) { c.GetInfoTimeout = 100 * time.Millisecond; c.SlowProbes = 1000 })
		path := filepath.Join(f.dir, "dead.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false) // a crash leaves the file
		p := &fakePlugin{path: path, info: draInfo("dead.example.com"), server: grpc.NewServer(), done: make(chan struct{})}
		registerapi.RegisterRegistrationServer(p.server, p)
		go func() {
			defer close(p.done)
			_ = p.server.Serve(l)
		}()
		f.waitRegistered(t, registerapi.DRAPlugin, "dead.example.com", path)
		p.server.Stop()
		<-p.done
		f.waitGone(t, registerapi.DRAPlugin, "dead.example.com")
	})
}

// A plugin that missed its "registered" notice (the call failed) is told
// again after the next successful probe: the DRA helper waits for it.
func TestMissedNoticeIsSentAgain(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(f.dir, "deaf.sock")
	p := &fakePlugin{path: path, info: draInfo("deaf.example.com"), server: grpc.NewServer(), done: make(chan struct{}), failNotify: 1}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	registerapi.RegisterRegistrationServer(p.server, p)
	go func() {
		defer close(p.done)
		_ = p.server.Serve(l)
	}()
	t.Cleanup(p.stop)
	f.start(t)
	f.waitRegistered(t, registerapi.DRAPlugin, "deaf.example.com", path)
	waitStatus(t, p, true)
}
