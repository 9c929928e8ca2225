package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// healthOf answers GET /v1/health (with ?live when live) of the agent at
// addr: its status code and body.
func healthOf(addr string, live bool) (int, api.Health, error) {
	u := "http://" + addr + "/v1/health"
	if live {
		u += "?live"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, api.Health{}, err
	}
	defer resp.Body.Close()
	var h api.Health
	err = json.NewDecoder(resp.Body).Decode(&h)
	return resp.StatusCode, h, err
}

// Real agents: a client agent run with -required-plugin-types csi,dra is
// not ready (503 missing_required_types, naming what is missing) while
// its node lacks an instance of either, and ready once both are
// registered; liveness stays 200 throughout; another agent without the
// flag is ready from the start. `plugreg coverage csi` answers which live
// nodes lack the type, in a table and with -json. Before, the flag did
// not exist (the agent refused to start) and neither did the command.
func TestRequiredTypesAndCoverageCommand(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterConfig{})
	req := c.StartClient(t, "host-req", "127.0.0.1", "-plugin-socket", "off", "-required-plugin-types", "csi, dra")
	free := c.StartClient(t, "host-free", "127.0.0.1", "-plugin-socket", "off")
	c.WaitReady(t)

	ready := func(a *proctest.Agent, want int, missing []string) {
		t.Helper()
		c.Poll(t, fmt.Sprintf("%s ready %d, missing %v", a.Node, want, missing), func() (bool, string) {
			code, h, err := healthOf(a.HTTP, false)
			if err != nil || code != want || !reflect.DeepEqual(h.MissingTypes, missing) {
				return false, fmt.Sprintf("%d %+v %v", code, h, err)
			}
			if want != 200 && (h.Status != "missing_required_types" || !strings.Contains(h.Reason, strings.Join(missing, ", "))) {
				t.Fatalf("%s: %+v, want missing_required_types naming %v", a.Node, h, missing)
			}
			return true, ""
		})
		if code, _, err := healthOf(a.HTTP, true); code != 200 || err != nil {
			t.Fatalf("%s liveness: %d %v", a.Node, code, err)
		}
	}
	ready(req, 503, []string{"csi", "dra"})
	ready(free, 200, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	register := func(typ, node string) {
		t.Helper()
		p := &api.PluginInfo{Type: typ, Name: typ + "-node", AllocID: node, NodeID: node, ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/p.sock"}}
		if _, err := c.Servers[0].API.Register(ctx, p); err != nil {
			t.Fatalf("register %s on %s: %v", typ, node, err)
		}
	}
	register("csi", req.Node)
	ready(req, 503, []string{"dra"})
	register("dra", req.Node)
	ready(req, 200, nil)
	if _, err := c.Servers[0].API.Deregister(ctx, "csi", "csi-node", req.Node); err != nil {
		t.Fatal(err)
	}
	ready(req, 503, []string{"csi"})

	// Which live client nodes lack the CSI node plugin? host-free only
	// (host-req's instance was deregistered above: register it again).
	register("csi", req.Node)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(c.Bin, append([]string{"coverage", "-addr", free.HTTP}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("plugreg coverage %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	c.Poll(t, "plugreg coverage -json: host-free lacks csi", func() (bool, string) {
		out := cli("-json", "-role", "client", "csi")
		var cov api.Coverage
		if err := json.Unmarshal([]byte(out), &cov); err != nil {
			t.Fatalf("coverage -json: %v\n%s", err, out)
		}
		ok := reflect.DeepEqual(cov.Missing, []string{"host-free"}) && reflect.DeepEqual(cov.Covered, []string{"host-req"}) && cov.Nodes == 2
		return ok, out
	})
	out := cli("csi")
	for _, want := range []string{"NODE", "host-free  missing", "host-req   covered", "server-1   missing", "5 live nodes, 1 covered, 4 missing"} {
		if !strings.Contains(out, want) {
			t.Fatalf("plugreg coverage csi:\n%s\nwant %q", out, want)
		}
	}
}
