package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Every agent's /v1/metrics, scraped from real processes after writes,
// follows Prometheus' conventions as its own tools check them: promlint
// (what `promtool check metrics` runs) finds nothing, and Debian's
// promtool, when installed (CI installs it; PLUGREG_REQUIRE_PROMETHEUS=1
// makes its absence a failure), exits 0. The series an operator looks for
// first are there, under their conventional names and types.
func TestMetricsFollowPrometheusConventions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	promtool := requirePrometheusTool(t, "promtool")
	c := proctest.StartCluster(t, proctest.ClusterConfig{})
	c.StartClient(t, "client-1", "127.0.0.1")
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, alloc := range []string{"a1", "a2", "a3"} {
		if _, err := c.Servers[0].API.Register(ctx, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: alloc,
			ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // the state gauges are set once a second

	leaderSeen := false
	for i, a := range append(append([]*proctest.Agent{}, c.Servers...), c.Clients...) {
		resp, err := http.Get("http://" + a.HTTP + "/v1/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: /v1/metrics: %d %v", a.Name, resp.StatusCode, err)
		}
		problems, err := promlint.New(bytes.NewReader(body)).Lint()
		if err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
		for _, p := range problems {
			t.Errorf("%s: promlint: %s: %s", a.Name, p.Metric, p.Text)
		}
		if promtool != "" {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = bytes.NewReader(body)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: promtool check metrics: %v\n%s", a.Name, err, out)
			}
		}
		p := expfmt.NewTextParser(model.LegacyValidation) // what promtool checks names against
		families, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
		info := families["plugreg_build_info"]
		if info == nil || info.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Fatalf("%s: no plugreg_build_info 1", a.Name)
		}
		labels := map[string]string{}
		for _, l := range info.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] == "" || !strings.HasPrefix(labels["goversion"], "go") {
			t.Errorf("%s: plugreg_build_info labels %v", a.Name, labels)
		}
		for _, name := range []string{"plugreg_anti_entropy_rounds_total", "plugreg_plugin_socket_sessions_live"} {
			if families[name] == nil {
				t.Errorf("%s: no %s", a.Name, name)
			}
		}
		if i >= len(c.Servers) {
			for _, name := range []string{"plugreg_fanout_upstreams", "plugreg_fanout_fell_behind_total"} {
				if families[name] == nil {
					t.Errorf("%s: no %s", a.Name, name)
				}
			}
			continue // a client agent: no Raft, no state
		}
		want := map[string]string{
			"plugreg_fsm_applied_index":               "GAUGE",
			"plugreg_fsm_instances":                   "GAUGE",
			"plugreg_server_is_leader":                "GAUGE",
			"plugreg_raft_fsm_apply_batch_seconds":    "HISTOGRAM",
			"plugreg_memberlist_gossip_seconds":       "HISTOGRAM",
			"plugreg_registry_changes_total":          "COUNTER",
			"plugreg_registry_watchers":               "GAUGE",
			"plugreg_registry_events_delivered_total": "COUNTER",
		}
		if families["plugreg_server_is_leader"].GetMetric()[0].GetGauge().GetValue() == 1 {
			leaderSeen = true
			want["plugreg_raft_apply_total"] = "COUNTER"
			want["plugreg_raft_commit_time_seconds"] = "HISTOGRAM"
			want["plugreg_raft_state_leader_total"] = "COUNTER"
		}
		for name, typ := range want {
			if f := families[name]; f == nil {
				t.Errorf("%s: no %s", a.Name, name)
			} else if f.GetType().String() != typ {
				t.Errorf("%s: %s is a %v, want a %s", a.Name, name, f.GetType(), typ)
			}
		}
		if v := families["plugreg_fsm_instances"].GetMetric()[0].GetGauge().GetValue(); v < 3 {
			t.Errorf("%s: plugreg_fsm_instances %v, want at least the 3 registered", a.Name, v)
		}
		registered := 0.0
		for _, m := range families["plugreg_registry_changes_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == "registered" {
					registered = m.GetCounter().GetValue()
				}
			}
		}
		if registered < 3 {
			t.Errorf("%s: plugreg_registry_changes_total{kind=registered} %v, want at least the 3 registered", a.Name, registered)
		}
	}
	if !leaderSeen {
		t.Error("no server said it leads")
	}

	// A plugin type's coverage series go when its last instance does
	// (they would otherwise show its last gaps forever: the sink keeps
	// every series it is not told to forget).
	scrape := func() string {
		resp, err := http.Get("http://" + c.Servers[0].HTTP + "/v1/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	c.Poll(t, "coverage series of type csi", func() (bool, string) {
		return strings.Contains(scrape(), `plugreg_coverage_nodes{node="server-1",state="covered",type="csi"}`), "none"
	})
	for _, alloc := range []string{"a1", "a2", "a3"} {
		if _, err := c.Servers[0].API.Deregister(ctx, "csi", "ebs", alloc); err != nil {
			t.Fatal(err)
		}
	}
	c.Poll(t, "no coverage series of type csi", func() (bool, string) {
		for _, l := range strings.Split(scrape(), "\n") {
			if strings.HasPrefix(l, "plugreg_coverage_nodes{") && strings.Contains(l, `type="csi"`) {
				return false, l
			}
		}
		return true, ""
	})
}
