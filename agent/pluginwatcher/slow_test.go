package pluginwatcher

import (
	"net"
	"path/filepath"
	"testing"
	"time"

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
		p.setHang(false)
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
