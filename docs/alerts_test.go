package docs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/tests/framework/grafanadash"
	"sigs.k8s.io/yaml"
)

// Every alert in deploy/prometheus is per cluster (grouped by namespace
// and job, so that a second cluster's loss of its leader is not hidden by
// the first's), waits with a for:, and links its runbook section in
// operations.md, which must exist.
func TestAlertsArePerClusterWithARunbook(t *testing.T) {
	b, err := os.ReadFile("../deploy/prometheus/plugreg-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         *string           `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &rules); err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(t, "operations.md")
	const runbooks = "https://github.com/plugreg/plugreg/blob/main/docs/operations.md#"
	aggregation := regexp.MustCompile(`\b(sum|max|min|count|avg)\s*(by\s*\(([^)]*)\))?\s*\(`)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if r.For == nil {
				t.Errorf("%s: no for:", r.Alert)
			}
			url := r.Annotations["runbook_url"]
			if !strings.HasPrefix(url, runbooks) || !anchors[strings.TrimPrefix(url, runbooks)] {
				t.Errorf("%s: runbook_url %q is not a section of docs/operations.md", r.Alert, url)
			}
			for _, m := range aggregation.FindAllStringSubmatch(r.Expr, -1) {
				by := strings.ReplaceAll(m[3], " ", "")
				if !strings.Contains(","+by+",", ",namespace,") || !strings.Contains(","+by+",", ",job,") {
					t.Errorf("%s: %q aggregates across clusters: want by (namespace, job, ...)", r.Alert, m[0])
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts read")
	}
}

// Every query of the Grafana dashboard is one cluster's: each metric it
// reads is selected by the dashboard's namespace and cluster (job prefix)
// variables, so that a Prometheus scraping two releases shows each alone.
func TestDashboardIsPerCluster(t *testing.T) {
	dashboard, err := grafanadash.Load("../deploy/grafana/plugreg-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, v := range dashboard.Templating.List {
		vars[v.Name] = true
	}
	if !vars["namespace"] || !vars["cluster"] {
		t.Fatalf("variables %v: want namespace and cluster", vars)
	}
	// A metric name outside a function call or a by/on clause, with the
	// selector that follows it, if any.
	metric := regexp.MustCompile(`\b(up|plugreg_[a-z_]+)\b(\{[^}]*\})?`)
	n := 0
	for _, p := range dashboard.Panels {
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllStringSubmatch(tg.Expr, -1) {
				n++
				if !strings.Contains(m[2], `namespace=~"$namespace"`) || !strings.Contains(m[2], `job=~"${cluster}`) {
					t.Errorf("panel %q: %s%s is not selected by namespace and cluster", p.Title, m[1], m[2])
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no queries read")
	}
}
