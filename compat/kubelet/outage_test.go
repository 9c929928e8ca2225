//go:build linux

package kubelet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent/pluginwatcher"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"google.golang.org/grpc"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Issue 27, item 1: plugreg's own failures (no leader during an election,
// no server at all) must never reach a plugin as "not registered": CSI's
// node-driver-registrar exits on it (kubernetes/kubernetes#69992). Against
// real agent processes, with the real DRA helper. What it proves is in
// README.md.

// outageWait bounds the waits that span a watcher's backoff: after an
// outage of a few writes the next retry may be 30 s (RetryMax) away.
const outageWait = 90 * time.Second

// noticeRecorder records every NotifyRegistrationStatus a helper receives
// (RegistrationStatus() keeps only the last) and counts its GetInfo calls,
// from a gRPC interceptor on the helper's registration server.
type noticeRecorder struct {
	mu       sync.Mutex
	notices  []*registerapi.RegistrationStatus
	getInfos int
}

func (r *noticeRecorder) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	r.mu.Lock()
	switch {
	case strings.HasSuffix(info.FullMethod, "/NotifyRegistrationStatus"):
		if s, ok := req.(*registerapi.RegistrationStatus); ok {
			r.notices = append(r.notices, &registerapi.RegistrationStatus{PluginRegistered: s.PluginRegistered, Error: s.Error})
		}
	case strings.HasSuffix(info.FullMethod, "/GetInfo"):
		r.getInfos++
	}
	r.mu.Unlock()
	return h(ctx, req)
}

// counts returns how many notices came, how many said "not registered"
// (with the first one's reason), and how many GetInfo calls.
func (r *noticeRecorder) counts() (notices, refusals int, firstRefusal string, getInfos int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.notices {
		if !s.PluginRegistered {
			if refusals == 0 {
				firstRefusal = s.Error
			}
			refusals++
		}
	}
	return len(r.notices), refusals, firstRefusal, r.getInfos
}

func (r *noticeRecorder) registeredNotices() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.notices {
		if s.PluginRegistered {
			n++
		}
	}
	return n
}

// outageHost is one client agent with a plugins dir and the helper in it.
type outageHost struct {
	name, ip string
	driver   string   // the helper's driver name: one per host, as a plugin list shows the newest instance of a name only
	args     []string // beyond -plugins-dir
	mode     pluginwatcher.Mode
	dir      string // its plugins dir, named plugins_registry, links resolved
	draDir   string
	agent    *proctest.Agent
	rec      *noticeRecorder
	helper   helper
}

func (h *outageHost) startHelper(t *testing.T) {
	t.Helper()
	h.helper = startHelper(t, h.name, h.dir, h.draDir, kubeletplugin.DriverName(h.driver), kubeletplugin.GRPCInterceptor(h.rec.intercept))
}

// socket is the helper's registration socket.
func (h *outageHost) socket() string { return filepath.Join(h.dir, h.driver+"-reg.sock") }

// failedRegistrations returns the watcher's failed Registers that failed
// with code, in its agent's log from byte offset on.
func (h *outageHost) failedRegistrations(offset int, code string) []string {
	l := h.agent.Log()
	if offset > len(l) {
		return nil
	}
	var out []string
	for _, line := range strings.Split(l[offset:], "\n") {
		if strings.Contains(line, "registration failed; will retry from GetInfo") && strings.Contains(line, code+": ") {
			out = append(out, line)
		}
	}
	return out
}

// listedOn returns the instance of driver on node as c lists it, or nil.
func listedOn(c *client.Client, driver, node string) (*api.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, _, err := c.List(ctx, registerapi.DRAPlugin, &client.QueryOptions{Stale: true})
	if errors.Is(err, api.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, p := range l {
		if p.Name == driver && p.NodeID == node {
			return p, nil
		}
	}
	return nil, nil
}

// checkNoRefusal fails the test if a helper was ever told "not
// registered", or, in a shared dir, told anything at all.
func checkNoRefusal(t *testing.T, hosts []*outageHost, when string) {
	t.Helper()
	for _, h := range hosts {
		notices, refusals, first, _ := h.rec.counts()
		if refusals > 0 {
			t.Errorf("%s: %s's helper was told %d times it is not registered (first: %q)", when, h.name, refusals, first)
		}
		if h.mode == pluginwatcher.ModeShared && notices > 0 {
			t.Errorf("%s: %s's helper, in a dir shared with kubelet, got %d NotifyRegistrationStatus calls", when, h.name, notices)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// waitFailedRegistrations waits until each host's watcher has logged at
// least n Registers failed with code since offsets[i]: the writes were
// tried, failed for that reason, and are being retried.
func waitFailedRegistrations(t *testing.T, c *proctest.Cluster, hosts []*outageHost, offsets []int, n int, code string) {
	t.Helper()
	what := fmt.Sprintf("%d registrations failed with %s on every host", n, code)
	took := proctest.Poll(t, outageWait, what, c.Procs(), func() (bool, string) {
		for i, h := range hosts {
			if got := len(h.failedRegistrations(offsets[i], code)); got < n {
				return false, fmt.Sprintf("%s: %d", h.name, got)
			}
		}
		return true, ""
	})
	for i, h := range hosts {
		failed := h.failedRegistrations(offsets[i], code)
		t.Logf("%s: %s: within %v, e.g. %s", what, h.name, took.Round(time.Millisecond), failed[0])
	}
}

// waitBackAndRegistered waits until each host's watcher has registered its
// helper since offsets[i] (its retries succeeded), every server's replica
// lists it (its node, the AllocID of its registration socket), and, in an
// owned dir, the helper has been told "registered" more than toldBefore[i]
// times.
func waitBackAndRegistered(t *testing.T, c *proctest.Cluster, hosts []*outageHost, offsets, toldBefore []int, what string) {
	t.Helper()
	start := time.Now()
	proctest.Poll(t, outageWait, what, c.Procs(), func() (bool, string) {
		for i, h := range hosts {
			if l := h.agent.Log(); offsets[i] > len(l) || !strings.Contains(l[offsets[i]:], "plugin registered: type=DRAPlugin name="+h.driver) {
				return false, fmt.Sprintf("%s's watcher has not registered its helper yet", h.name)
			}
			if ok, msg := h.listedEverywhere(c); !ok {
				return false, msg
			}
			if h.mode == pluginwatcher.ModeOwned && h.rec.registeredNotices() <= toldBefore[i] {
				return false, fmt.Sprintf("%s's helper not told it is registered yet", h.name)
			}
		}
		return true, ""
	})
	t.Logf("%s: in %v", what, time.Since(start).Round(time.Millisecond))
}

// listedEverywhere reports whether every server's replica lists the
// host's helper: its node, the AllocID of its registration socket.
func (h *outageHost) listedEverywhere(c *proctest.Cluster) (bool, string) {
	for j, s := range c.Servers {
		p, err := listedOn(s.API, h.driver, h.name)
		switch {
		case err != nil:
			return false, fmt.Sprintf("server %d: %v", j+1, err)
		case p == nil:
			return false, fmt.Sprintf("server %d does not list %s's helper", j+1, h.name)
		case p.AllocID != pluginwatcher.AllocID(h.name, h.socket()):
			return false, fmt.Sprintf("server %d lists %s's helper as %s", j+1, h.name, p.AllocID)
		}
	}
	return true, ""
}

// waitStillListed waits until each host's watcher has settled the
// Deregister of the helper's old incarnation that failed in the outage
// (it ran, or was dropped once the same instance was registered again),
// then until every server lists the helper: a Deregister that ran after
// the new Register would have removed it for good.
func waitStillListed(t *testing.T, c *proctest.Cluster, hosts []*outageHost, offsets []int) {
	t.Helper()
	proctest.Poll(t, outageWait, "the old incarnations' Deregisters settled, and every helper still listed", c.Procs(), func() (bool, string) {
		for i, h := range hosts {
			l := h.agent.Log()
			if offsets[i] > len(l) {
				return false, h.name + "'s log is shorter"
			}
			l = l[offsets[i]:]
			ran := strings.Contains(l, "plugin deregistered: type=DRAPlugin name="+h.driver)
			dropped := strings.Contains(l, "pending deregistration dropped: the same instance is registered again: type=DRAPlugin name="+h.driver)
			if !ran && !dropped {
				return false, h.name + ": the old incarnation's Deregister still pending"
			}
			if ok, msg := h.listedEverywhere(c); !ok {
				return false, msg
			}
		}
		return true, ""
	})
}

// startOutageCluster starts three servers and the two client agents, one
// per mode, each with its plugins dir named plugins_registry (the owned
// one says -plugins-dir-mode owned; the other is shared by default).
func startOutageCluster(t *testing.T) (*proctest.Cluster, []*outageHost) {
	t.Helper()
	c := proctest.StartCluster(t, proctest.ClusterConfig{
		ServerIPs:  []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"},
		ServerArgs: []string{"-raft-multiplier", "1"},
	})
	hosts := []*outageHost{
		{name: "host-owned", ip: "127.0.0.11", driver: "owned.compat.plugreg.io", args: []string{"-plugins-dir-mode", "owned"}, mode: pluginwatcher.ModeOwned},
		{name: "host-shared", ip: "127.0.0.12", driver: "shared.compat.plugreg.io", mode: pluginwatcher.ModeShared}, // auto: the dir's name
	}
	root := shortDir(t)
	for _, h := range hosts {
		h.dir = filepath.Join(root, h.name, pluginwatcher.KubeletDirName)
		h.draDir = filepath.Join(root, h.name, "dra")
		makeDirs(t, &h.dir, &h.draDir)
		h.rec = &noticeRecorder{}
		h.agent = c.StartClient(t, h.name, h.ip, append([]string{"-plugins-dir", h.dir}, h.args...)...)
	}
	c.WaitReady(t)
	for _, h := range hosts {
		if want := "plugins_dir_mode=" + string(h.mode); !strings.Contains(h.agent.Log(), want) {
			t.Fatalf("%s's log does not say %s", h.name, want)
		}
	}
	return c, hosts
}

// logOffsets returns where each host's agent log ends now.
func logOffsets(hosts []*outageHost) []int {
	out := make([]int, len(hosts))
	for i, h := range hosts {
		out[i] = len(h.agent.Log())
	}
	return out
}

// registeredNotices returns how many "registered" notices each host's
// helper has had so far.
func registeredNotices(hosts []*outageHost) []int {
	out := make([]int, len(hosts))
	for i, h := range hosts {
		out[i] = h.rec.registeredNotices()
	}
	return out
}

// The real DRA helper, on a client agent whose plugins dir is owned by
// plugreg and on one whose dir is shared with kubelet, through a leader
// election that cannot end (two of three servers stopped: no quorum, no
// leader) and then with every server down, the helper restarted on its
// socket meanwhile: the agents' writes fail and are retried (their logs
// say so), the helper is never told it is not registered (in the shared
// dir it is told nothing at all), and once the servers are back it is
// listed by every server (and, in the owned dir, told it is registered).
func TestHelperThroughAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds plugreg and runs five agent processes")
	}
	c, hosts := startOutageCluster(t)

	// 1. No leader: two servers stopped, the third cannot win an
	// election. The helpers start now: their first writes fail.
	for _, s := range c.Servers[1:] {
		if _, ok := s.Stop(t); !ok {
			t.FailNow()
		}
	}
	offsets := logOffsets(hosts)
	for _, h := range hosts {
		h.startHelper(t)
	}
	waitFailedRegistrations(t, c, hosts, offsets, 2, api.CodeNoLeader)
	checkNoRefusal(t, hosts, "with no leader")
	for _, h := range hosts {
		if n, _, _, _ := h.rec.counts(); n > 0 {
			t.Fatalf("%s's helper got %d notices before any registration succeeded", h.name, n)
		}
	}

	// Back: the two servers restart, an election ends; the retries
	// succeed.
	for _, s := range c.Servers[1:] {
		s.Start(t)
	}
	c.WaitReady(t)
	waitBackAndRegistered(t, c, hosts, offsets, make([]int, len(hosts)), "after the election: every helper registered and listed by every server")
	checkNoRefusal(t, hosts, "after the election")

	// 2. Every server down; each helper restarted on its socket (a
	// sidecar restarting meanwhile): the old incarnation's Deregister and
	// the new one's Register both fail.
	for _, s := range c.Servers {
		if _, ok := s.Stop(t); !ok {
			t.FailNow()
		}
	}
	offsets = logOffsets(hosts)
	told := registeredNotices(hosts)
	for _, h := range hosts {
		h.helper.Stop()
		h.startHelper(t)
	}
	waitFailedRegistrations(t, c, hosts, offsets, 2, api.CodeNoServer)
	checkNoRefusal(t, hosts, "with every server down")

	for _, s := range c.Servers {
		s.Start(t)
	}
	c.WaitReady(t)
	waitBackAndRegistered(t, c, hosts, offsets, told, "after the outage: every helper registered again and listed by every server")
	waitStillListed(t, c, hosts, offsets)
	checkNoRefusal(t, hosts, "after the outage")
	for _, h := range hosts {
		n, _, _, getInfos := h.rec.counts()
		t.Logf("%s (%s): %d NotifyRegistrationStatus calls, none \"not registered\"; %d GetInfo calls", h.name, h.mode, n, getInfos)
		// What the helper itself records: told "registered" by plugreg
		// in the owned dir; in the shared dir nothing, kubelet's to say.
		s := h.helper.status()
		if h.mode == pluginwatcher.ModeOwned && (s == nil || !s.PluginRegistered) {
			t.Errorf("%s: the helper's RegistrationStatus() = %v, want registered", h.name, s)
		}
		if h.mode == pluginwatcher.ModeShared && s != nil {
			t.Errorf("%s: the helper's RegistrationStatus() = %v in a shared dir, want none", h.name, s)
		}
	}
}
