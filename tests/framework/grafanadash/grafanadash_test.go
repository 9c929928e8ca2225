package grafanadash

import (
	"strings"
	"testing"
)

// The repository's dashboard: its cluster variable makes the job prefix
// of the servers' job, and every query comes out with no variable left.
func TestQueriesFillEveryVariable(t *testing.T) {
	d, err := Load("../../../deploy/grafana/plugreg-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := d.ClusterPrefix("staging-plugreg-servers"); err != nil || p != "staging-plugreg-" {
		t.Fatalf("ClusterPrefix = %q, %v; want staging-plugreg-", p, err)
	}
	qs, err := d.Queries("plugins", "plugreg-servers", "15s")
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) == 0 {
		t.Fatal("no queries")
	}
	for _, q := range qs {
		if strings.Contains(q.Expr, "$") {
			t.Errorf("panel %q: a variable left in %s", q.Panel, q.Expr)
		}
		if !strings.Contains(q.Expr, `namespace=~"plugins"`) || !strings.Contains(q.Expr, `job=~"plugreg-`) {
			t.Errorf("panel %q: %s is not this cluster's", q.Panel, q.Expr)
		}
	}
}
