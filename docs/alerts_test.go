package docs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

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
