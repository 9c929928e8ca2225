// Package grafanadash reads the Grafana dashboard of deploy/grafana and
// gives its queries as Grafana sends them for one cluster: the tests that
// run them against a real Prometheus (tests/e2e, compat/kubernetes) and
// the one that checks their selectors (docs) read it the same way.
package grafanadash

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Dashboard is what the tests read of the dashboard: its variables and
// its panels' queries.
type Dashboard struct {
	Templating struct {
		List []Variable
	}
	Panels []Panel
}

// Variable is a template variable; Regex is Grafana's /.../ form.
type Variable struct{ Name, Regex string }

// Panel is a panel's title and its queries.
type Panel struct {
	Title   string
	Targets []struct{ Expr string }
}

// Query is one of a panel's queries with its variables filled in.
type Query struct{ Panel, Expr string }

// Load reads the dashboard at path.
func Load(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", path, err)
	}
	return &d, nil
}

// ClusterPrefix is what the dashboard's cluster variable makes of the
// servers' job name: its regex's first group, as Grafana takes it.
func (d *Dashboard) ClusterPrefix(serversJob string) (string, error) {
	for _, v := range d.Templating.List {
		if v.Name != "cluster" {
			continue
		}
		re, err := regexp.Compile(strings.Trim(v.Regex, "/"))
		if err != nil {
			return "", fmt.Errorf("the cluster variable's regex: %w", err)
		}
		if m := re.FindStringSubmatch(serversJob); len(m) > 1 {
			return m[1], nil
		}
		return "", fmt.Errorf("the cluster variable's regex %s makes nothing of job %q", v.Regex, serversJob)
	}
	return "", fmt.Errorf("the dashboard has no cluster variable")
}

// Queries returns every panel's queries as Grafana sends them for the
// cluster whose servers' job is serversJob in namespace (".*" where the
// scrape config adds no namespace label: the variable's All), with
// $__rate_interval as rateInterval.
func (d *Dashboard) Queries(namespace, serversJob, rateInterval string) ([]Query, error) {
	cluster, err := d.ClusterPrefix(serversJob)
	if err != nil {
		return nil, err
	}
	r := strings.NewReplacer("$__rate_interval", rateInterval, "$namespace", namespace, "${cluster}", cluster)
	var out []Query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, Query{Panel: p.Title, Expr: r.Replace(tg.Expr)})
		}
	}
	return out, nil
}
