package main

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/tools/jepsen/check"
)

func TestCutOffAnswers(t *testing.T) {
	cut := fault{Name: "isolate-client", Cut: "c1", CutFrom: 100, CutTo: 200}
	op := func(id int, node, outcome string, start, end int64) check.Op {
		return check.Op{ID: id, Node: node, F: check.FRegister, Type: "t0", Name: "n0", Alloc: "a0", Outcome: outcome, Start: start, End: end}
	}
	for _, tc := range []struct {
		name   string
		ops    []check.Op
		faults []fault
		want   []int // the op IDs reported
	}{
		{name: "failed and unknown answers while cut off", ops: []check.Op{op(1, "c1", check.Fail, 110, 120), op(2, "c1", check.Unknown, 130, 190)}, faults: []fault{cut}},
		{name: "an ok answer while cut off", ops: []check.Op{op(3, "c1", check.OK, 110, 120)}, faults: []fault{cut}, want: []int{3}},
		{name: "begun before the cut", ops: []check.Op{op(4, "c1", check.OK, 90, 120)}, faults: []fault{cut}},
		{name: "ended after the heal", ops: []check.Op{op(5, "c1", check.OK, 150, 210)}, faults: []fault{cut}},
		{name: "through another agent", ops: []check.Op{op(6, "n1", check.OK, 110, 120), op(7, "c2", check.OK, 110, 120)}, faults: []fault{cut}},
		{name: "a fault that cut no client agent", ops: []check.Op{op(8, "c1", check.OK, 110, 120)}, faults: []fault{{Name: "isolate-leader", CutFrom: 100, CutTo: 200}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for _, v := range cutOffAnswers(tc.ops, tc.faults) {
				if v.Checker != "isolated" || !strings.Contains(v.Detail, "cut off from every server") {
					t.Errorf("violation %v", v)
				}
				for _, o := range tc.ops {
					if strings.HasPrefix(v.Detail, fmt.Sprintf("op %d:", o.ID)) {
						got = append(got, o.ID)
					}
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("reported ops %v, want %v", got, tc.want)
			}
		})
	}
}

// A client agent refuses server flags (cmd/plugreg's serverFlags): its
// command line must have none, and join every server.
func TestClientAgentArgs(t *testing.T) {
	d := newDB(t.TempDir(), "plugreg", &runConfig{portBase: 21500, clientAgents: 2, heartbeatTimeout: 500e6, snapshotThreshold: 100, journalSize: 600})
	if len(d.hosts) != 5 || d.hosts[3] != d.clients[0] || d.clientIndex(1) != 4 {
		t.Fatalf("hosts %d, clients %d", len(d.hosts), len(d.clients))
	}
	c := d.clients[1]
	if c.Name != "c2" || c.IP != "127.0.0.5" || c.HTTP != "127.0.0.5:21503" || c.Journal != "" {
		t.Fatalf("client agent %+v", c)
	}
	args := strings.Join(d.args(c), " ")
	for _, f := range []string{"-server-port", "-bootstrap-expect", "-snapshot-threshold", "-snapshot-interval", "-trailing-logs", "-state-check-interval",
		"-node-reap-after", "-journal-size", "-apply-log", "-heartbeat-timeout"} {
		if strings.Contains(args, f+" ") {
			t.Errorf("client agent args %q have the server flag %s", args, f)
		}
	}
	for _, want := range []string{"-client ", "-gossip-port 21504", "-join 127.0.0.1:21502", "-join 127.0.0.2:21502", "-join 127.0.0.3:21502"} {
		if !strings.Contains(args+" ", want) {
			t.Errorf("client agent args %q lack %q", args, want)
		}
	}
}
