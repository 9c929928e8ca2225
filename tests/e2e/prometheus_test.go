package e2e

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

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/grafanadash"
	"github.com/plugreg/plugreg/tests/framework/proctest"
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

// A real Prometheus (Debian's) scrapes every agent of a real cluster with
// the jobs and alerts of deploy/prometheus, and
//   - its query API answers for the series an operator reads: every target
//     up, one build_info per agent, one leader, elections, the
//     registrations applied on each server, a histogram quantile of raft's
//     commit time, plugin sessions;
//   - every query of the Grafana dashboard (deploy/grafana) runs and, but
//     for the refusals nobody made here, returns series;
//   - every alert rule loads and evaluates without error, the coverage
//     alert is pending (the servers and the client agent lack the csi
//     type: its instances were registered through the API, on no node)
//     and the no-leader alert is not.
func TestRealPrometheusScrapesEveryAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and Prometheus")
	}
	bin := requirePrometheusTool(t, "prometheus")
	if bin == "" {
		t.Skip("prometheus is not installed")
	}
	rules, err := os.ReadFile("../../deploy/prometheus/plugreg-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if promtool := requirePrometheusTool(t, "promtool"); promtool != "" {
		if out, err := exec.Command(promtool, "check", "rules", "../../deploy/prometheus/plugreg-alerts.yml").CombinedOutput(); err != nil {
			t.Fatalf("promtool check rules: %v\n%s", err, out)
		}
	}
	dashboard, err := grafanadash.Load("../../deploy/grafana/plugreg-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}

	c := proctest.StartCluster(t, proctest.ClusterConfig{})
	c.StartClient(t, "client-1", "127.0.0.1")
	c.WaitReady(t)

	dir := t.TempDir()
	targets := func(agents []*proctest.Agent) string {
		var out []string
		for _, a := range agents {
			out = append(out, fmt.Sprintf("%q", a.HTTP))
		}
		return strings.Join(out, ", ")
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [plugreg-alerts.yml]
scrape_configs:
  - job_name: plugreg-servers
    metrics_path: /v1/metrics
    static_configs: [{targets: [%s]}]
  - job_name: plugreg-clients
    metrics_path: /v1/metrics
    static_configs: [{targets: [%s]}]
`, targets(c.Servers), targets(c.Clients))
	for name, b := range map[string][]byte{"prometheus.yml": []byte(config), "plugreg-alerts.yml": rules} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
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

	// Writes go on while Prometheus scrapes, so that rates have
	// something to show.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	writes := make(chan error, 1)
	wctx, stopWrites := context.WithCancel(ctx)
	go func() {
		var err error
		for i := 0; wctx.Err() == nil; i++ {
			_, err = c.Servers[1].API.Register(wctx, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: fmt.Sprint("a", i%5),
				Version: fmt.Sprint(i), ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}})
			if err != nil && wctx.Err() == nil {
				break
			}
			err = nil
			time.Sleep(100 * time.Millisecond)
		}
		writes <- err
	}()
	defer func() {
		stopWrites()
		if err := <-writes; err != nil {
			t.Errorf("writes: %v", err)
		}
	}()

	api := func(path string, v any) string {
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			return err.Error()
		}
		return ""
	}
	// query runs an instant query and returns its vector's values (nil
	// and the error when it fails).
	query := func(q string) ([]float64, string) {
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
			Error string
		}
		if e := api("/api/v1/query?query="+url.QueryEscape(q), &r); e != "" {
			return nil, e
		}
		if r.Status != "success" {
			return nil, r.Error
		}
		out := []float64{}
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
		{`up{job=~"plugreg-.*"} == 1`, func(v []float64) bool { return len(v) == agents }},
		{`plugreg_build_info == 1`, func(v []float64) bool { return len(v) == agents }},
		{`sum(plugreg_server_is_leader)`, func(v []float64) bool { return len(v) == 1 && v[0] == 1 }},
		{`max(plugreg_raft_state_leader_total)`, func(v []float64) bool { return len(v) == 1 && v[0] >= 1 }},
		{`plugreg_registry_changes_total{kind="registered"} >= 5`, func(v []float64) bool { return len(v) == len(c.Servers) }},
		{`histogram_quantile(0.99, sum by (le) (plugreg_raft_commit_time_seconds_bucket)) > 0`, func(v []float64) bool { return len(v) == 1 }},
		{`plugreg_plugin_socket_sessions_live`, func(v []float64) bool { return len(v) == agents }},
	}
	for _, tc := range cases {
		c.Poll(t, "Prometheus: "+tc.query, func() (bool, string) {
			v, detail := query(tc.query)
			return v != nil && tc.ok(v), detail
		})
	}

	// Every panel's queries, as Grafana sends them ($__rate_interval is
	// at least four scrape intervals).
	mayBeEmpty := map[string]bool{"Refusals per second (ACL, limits, dropped streams)": true}
	// The dashboard's variables as Grafana resolves them against this
	// Prometheus: no namespace label (All, .*), and the cluster's job
	// prefix from its servers' job.
	queries, err := dashboard.Queries(".*", "plugreg-servers", "15s")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		c.Poll(t, fmt.Sprintf("dashboard panel %q: %s", q.Panel, q.Expr), func() (bool, string) {
			v, detail := query(q.Expr)
			return v != nil && (len(v) > 0 || mayBeEmpty[q.Panel]), detail
		})
	}

	// Every alert rule evaluated, healthy; the coverage gap pending or
	// firing; no leader inactive.
	c.Poll(t, "alert rules evaluated", func() (bool, string) {
		var r struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name, State, Health, LastError string
					}
				}
			}
		}
		if e := api("/api/v1/rules", &r); e != "" {
			return false, e
		}
		states := map[string]string{}
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				if rule.Health != "ok" {
					return false, rule.Name + ": " + rule.Health + " " + rule.LastError
				}
				states[rule.Name] = rule.State
			}
		}
		gap := states["PlugregCoverageGap"]
		return len(states) == strings.Count(string(rules), "- alert:") && (gap == "pending" || gap == "firing") && states["PlugregNoLeader"] == "inactive", fmt.Sprint(states)
	})
}
