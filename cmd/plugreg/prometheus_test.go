package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/internal/testing/proctest"
)

// requirePrometheusTool finds one of Debian's prometheus package's
// binaries: "" (the test skips) when it is absent, a failure when
// PLUGREG_REQUIRE_PROMETHEUS is set (CI sets it).
func requirePrometheusTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("PLUGREG_REQUIRE_PROMETHEUS") != "" {
			t.Fatalf("%s is not installed (Debian: apt-get install prometheus)", name)
		}
		return ""
	}
	return path
}

// A real Prometheus (Debian's) scrapes every agent of a real cluster, and
// its query API answers for the series an operator's dashboard reads:
// every target up, one build_info per agent, the leader's elections, the
// registrations applied on each server, and raft's commit time as a
// histogram quantile.
func TestRealPrometheusScrapesEveryAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and Prometheus")
	}
	bin := requirePrometheusTool(t, "prometheus")
	if bin == "" {
		t.Skip("prometheus is not installed")
	}
	c := proctest.StartCluster(t, proctest.ClusterConfig{})
	c.StartClient(t, "client-1", "127.0.0.1")
	c.WaitReady(t)

	dir := t.TempDir()
	var targets []string
	for _, a := range c.Agents() {
		targets = append(targets, fmt.Sprintf("%q", a.HTTP))
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: plugreg
    metrics_path: /v1/metrics
    static_configs:
      - targets: [%s]
`, strings.Join(targets, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	port := proctest.FreePorts(t, "127.0.0.1", 1)[0]
	web := fmt.Sprintf("127.0.0.1:%d", port)
	prom := proctest.Start(t, "prometheus", bin, filepath.Join(dir, "prometheus.log"),
		"--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	c.Track(prom)
	t.Cleanup(func() {
		if d, ok := prom.Terminate(proctest.StopBound); !ok {
			t.Errorf("prometheus did not stop on SIGTERM (%v)", d)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, alloc := range []string{"a1", "a2", "a3"} {
		if _, err := c.Servers[1].API.Register(ctx, &client.PluginInfo{Type: "csi", Name: "ebs", AllocID: alloc,
			ConnectionInfo: &client.ConnectionInfo{SocketPath: "/run/ebs.sock"}}); err != nil {
			t.Fatal(err)
		}
	}
	// query runs an instant query and returns its vector's values.
	query := func(q string) ([]float64, string) {
		resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil, err.Error()
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
			Error string
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, err.Error()
		}
		if r.Status != "success" {
			return nil, r.Error
		}
		var out []float64
		for _, v := range r.Data.Result {
			var f float64
			fmt.Sscan(fmt.Sprint(v.Value[1]), &f)
			out = append(out, f)
		}
		return out, fmt.Sprint(out)
	}
	agents := len(c.Agents())
	cases := []struct {
		query string
		ok    func([]float64) bool
	}{
		{`up{job="plugreg"} == 1`, func(v []float64) bool { return len(v) == agents }},
		{`plugreg_build_info == 1`, func(v []float64) bool { return len(v) == agents }},
		{`sum(plugreg_server_is_leader)`, func(v []float64) bool { return len(v) == 1 && v[0] == 1 }},
		{`max(plugreg_raft_state_leader_total)`, func(v []float64) bool { return len(v) == 1 && v[0] >= 1 }},
		{`plugreg_registry_changes_total{kind="registered"} >= 3`, func(v []float64) bool { return len(v) == len(c.Servers) }},
		{`histogram_quantile(0.99, sum by (le) (plugreg_raft_commit_time_seconds_bucket)) > 0`, func(v []float64) bool { return len(v) == 1 }},
		{`plugreg_plugin_socket_sessions_live`, func(v []float64) bool { return len(v) == agents }},
	}
	for _, tc := range cases {
		c.Poll(t, "Prometheus: "+tc.query, func() (bool, string) {
			v, detail := query(tc.query)
			return v != nil && tc.ok(v), detail
		})
	}
}
