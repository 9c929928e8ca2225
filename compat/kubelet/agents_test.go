//go:build linux

package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent/pluginwatcher"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The issue's acceptance test, against real processes: three `plugreg
// agent` servers and one client agent (`-client -plugins-dir`), built from
// this repository, and the real DRA helper registering in the client
// agent's plugins dir. What it proves is in README.md.

const (
	clientNode = "host-1"
	reapAfter  = 3 * time.Second // the servers' -node-reap-after
)

// agentsEnv is the cluster of processes under test.
type agentsEnv struct {
	*proctest.Cluster
	client     *proctest.Agent
	pluginsDir string // the client agent's -plugins-dir, symbolic links resolved
	draDir     string // the helper's PluginDataDirectoryPath
	// onServer[i] reads server i's own replica (stale reads); viaClient
	// reads through the client agent (linearizable, served by a server).
	onServer  []*client.Client
	viaClient *client.Client
}

// listed returns the driver's entry in GET /v1/plugins/DRAPlugin as c
// answers it, or nil.
func listed(c *client.Client, stale bool) (*api.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, _, err := c.List(ctx, registerapi.DRAPlugin, &client.QueryOptions{Stale: stale})
	if errors.Is(err, api.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, p := range l {
		if p.Name == driverName {
			return p, nil
		}
	}
	return nil, nil
}

// checkEntry says what is wrong with a listed entry, or "".
func (e *agentsEnv) checkEntry(p *api.PluginInfo) string {
	sock := filepath.Join(e.pluginsDir, driverName+"-reg.sock")
	switch {
	case p.Type != registerapi.DRAPlugin || p.NodeID != clientNode:
		return fmt.Sprintf("listed as type %q on node %q", p.Type, p.NodeID)
	case p.AllocID != pluginwatcher.AllocID(clientNode, sock):
		return fmt.Sprintf("alloc ID %q, registration socket %q", p.AllocID, p.Options[pluginwatcher.OptionRegistrationSocket])
	case p.ConnectionInfo == nil || p.ConnectionInfo.SocketPath != filepath.Join(e.draDir, "dra.sock"):
		return fmt.Sprintf("endpoint %+v", p.ConnectionInfo)
	case p.Version != "v1.DRAPlugin":
		return fmt.Sprintf("version %q", p.Version)
	}
	return ""
}

// waitListed waits until every server's own replica lists the driver, and
// returns, per server, how long after start it was first seen there.
func (e *agentsEnv) waitListed(t *testing.T, what string, start time.Time) []time.Duration {
	t.Helper()
	seen := make([]time.Duration, len(e.onServer))
	e.Poll(t, what, func() (bool, string) {
		all, msg := true, ""
		for i, c := range e.onServer {
			if seen[i] > 0 {
				continue
			}
			p, err := listed(c, true)
			switch {
			case err != nil:
				msg = fmt.Sprintf("server %d: %v", i+1, err)
			case p == nil:
				msg = fmt.Sprintf("server %d does not list it", i+1)
			case e.checkEntry(p) != "":
				msg = fmt.Sprintf("server %d: %s", i+1, e.checkEntry(p))
			default:
				seen[i] = time.Since(start)
				continue
			}
			all = false
		}
		return all, msg
	})
	return seen
}

// waitGone waits until no server's replica lists the driver, and returns
// how long after start the last one dropped it.
func (e *agentsEnv) waitGone(t *testing.T, what string, start time.Time) time.Duration {
	t.Helper()
	e.Poll(t, what, func() (bool, string) {
		for i, c := range e.onServer {
			p, err := listed(c, true)
			if err != nil {
				return false, fmt.Sprintf("server %d: %v", i+1, err)
			}
			if p != nil {
				return false, fmt.Sprintf("server %d still lists it (node %s, alloc %s)", i+1, p.NodeID, p.AllocID)
			}
		}
		return true, ""
	})
	return time.Since(start)
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// startAgents builds plugreg and starts three servers on 127.0.0.1-3 and a
// client agent on 127.0.0.10 with a plugins dir; t's cleanups stop them
// all, check that each exited on SIGTERM within proctest.StopBound, and
// print the tails of their logs if the test failed (proctest.StartCluster).
func startAgents(t *testing.T) *agentsEnv {
	t.Helper()
	e := &agentsEnv{Cluster: proctest.StartCluster(t, proctest.ClusterConfig{
		ServerIPs:  []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"},
		ServerArgs: []string{"-node-reap-after", reapAfter.String(), "-raft-multiplier", "1"},
	})}

	// The client agent.
	root := shortDir(t) // unix socket paths are short
	e.pluginsDir, e.draDir = filepath.Join(root, "plugins"), filepath.Join(root, "dra")
	makeDirs(t, &e.pluginsDir, &e.draDir)
	e.client = e.StartClient(t, clientNode, "127.0.0.10", "-plugins-dir", e.pluginsDir)

	for _, s := range e.Servers {
		e.onServer = append(e.onServer, s.API)
	}
	e.viaClient = e.client.API

	// Ready: every server knows the leader, and the client agent answers a
	// linearizable read (it found a server through gossip).
	e.WaitReady(t)
	return e
}

// The acceptance test. A real DRA helper started on a client
// agent's plugins dir is listed by every server as a DRAPlugin of the
// client agent's node, and told it is registered; stopped, it is gone from
// every server; the client agent killed with SIGKILL, the leader reaps the
// node's plugins after -node-reap-after; the client agent restarted on
// its data dir, the still-running helper is registered again.
func TestAgentsAcceptance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds plugreg and runs four agent processes")
	}
	e := startAgents(t)
	sock := filepath.Join(e.pluginsDir, driverName+"-reg.sock")

	// 1. Registered on every server, and the helper told so.
	start := time.Now()
	h := startHelper(t, clientNode, e.pluginsDir, e.draDir)
	startedIn := time.Since(start)
	seen := e.waitListed(t, "the helper listed by every server", start)
	// The first Start in a process also pays for the fake clientset and
	// gRPC's first use; the time after Start returned is plugreg's part.
	t.Logf("registration: listed by servers 1, 2, 3 after %v; by every server %v after the helper's start (the issue hopes for a second; not asserted), %v after kubeletplugin.Start returned (in %v)",
		roundAll(seen), maxOf(seen).Round(time.Millisecond), (maxOf(seen) - startedIn).Round(time.Millisecond), startedIn.Round(time.Millisecond))
	e.Poll(t, "the helper told it is registered", func() (bool, string) {
		s := h.status()
		return s != nil && s.PluginRegistered, fmt.Sprintf("RegistrationStatus() = %v", s)
	})
	// The client agent serves the API through the servers: it lists the
	// same instance.
	if p, err := listed(e.viaClient, false); err != nil || p == nil || e.checkEntry(p) != "" {
		t.Fatalf("through the client agent: %+v, %v", p, err)
	}

	// 2. The helper stopped: gone from every server.
	start = time.Now()
	h.Stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the helper's registration socket is still there after Stop: %v", err)
	}
	took := e.waitGone(t, "the stopped helper gone from every server", start)
	t.Logf("deregistration: gone from every server %v after the helper's Stop", took.Round(time.Millisecond))

	// 3. Started again, then the client agent killed with SIGKILL: it
	// cannot deregister anything; the leader reaps the node's plugins
	// once the node has been dead for -node-reap-after.
	start = time.Now()
	h = startHelper(t, clientNode, e.pluginsDir, e.draDir)
	seen = e.waitListed(t, "the restarted helper listed by every server", start)
	t.Logf("registration again: listed by every server %v after the helper's start", maxOf(seen).Round(time.Millisecond))
	e.Poll(t, "the restarted helper told it is registered", func() (bool, string) {
		s := h.status()
		return s != nil && s.PluginRegistered, fmt.Sprintf("RegistrationStatus() = %v", s)
	})
	killed := e.client.Kill9(t)
	took = e.waitGone(t, "the dead node's plugins reaped on every server", killed)
	t.Logf("reap: gone from every server %v after kill -9 of the client agent (-node-reap-after %v; plus failure detection and the leader's reconcile tick)",
		took.Round(time.Millisecond), reapAfter)
	// Not a speed limit: the reaper must not act before the node has been
	// dead for reapAfter, and it was alive when killed.
	if took < reapAfter {
		t.Fatalf("the plugins were gone %v after the kill, before -node-reap-after %v", took, reapAfter)
	}
	reaped := false
	for _, s := range e.Servers {
		l := s.LogPath
		if b, err := os.ReadFile(l); err == nil && strings.Contains(string(b), "reaped plugins of dead node") &&
			strings.Contains(string(b), "dead_node="+clientNode) {
			reaped = true
		}
	}
	if !reaped {
		t.Fatalf("no server logged reaping node %s", clientNode)
	}

	// 4. The client agent restarted on its data dir, the helper still
	// running: found again and registered again.
	start = time.Now()
	e.client.Start(t)
	seen = e.waitListed(t, "the helper registered again by the restarted client agent", start)
	t.Logf("re-discovery: listed by every server %v after the client agent restarted", maxOf(seen).Round(time.Millisecond))
	e.Poll(t, "the helper told it is registered by the restarted agent", func() (bool, string) {
		s := h.status()
		return s != nil && s.PluginRegistered, fmt.Sprintf("RegistrationStatus() = %v", s)
	})
}
