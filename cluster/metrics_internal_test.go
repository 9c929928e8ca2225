package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
)

// A coverage pass walks every instance, so one runs only when the state
// or the members changed since the last, and not sooner after it than
// coverageCost times its duration; the counts it made are what emit sets
// in between.
func TestCoveragePassesOnlyOnChange(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register := func(alloc string) {
		p := &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: alloc, NodeID: s.cfg.NodeID, ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + alloc + ".sock"}}
		if _, err := s.Backend().Register(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	register("a1")
	var cov coverageGauges
	now := time.Now()
	s.updateCoverage(&cov, s.fsm.State(), now)
	if len(cov.counts) != 1 || cov.counts[0].typ != "csi" {
		t.Fatalf("first pass: %+v", cov.counts)
	}
	first := cov.counts

	s.updateCoverage(&cov, s.fsm.State(), now.Add(time.Minute))
	if &cov.counts[0] != &first[0] {
		t.Fatal("a pass ran with neither the state nor the members changed")
	}

	register("a2") // the state changed
	cov.passAt = now.Add(time.Hour)
	s.updateCoverage(&cov, s.fsm.State(), now.Add(time.Minute))
	if &cov.counts[0] != &first[0] {
		t.Fatal("a pass ran before the last one's cost allowed it")
	}
	s.updateCoverage(&cov, s.fsm.State(), now.Add(2*time.Hour))
	if &cov.counts[0] == &first[0] || cov.index != s.fsm.State().Index() {
		t.Fatal("no pass after the state changed")
	}
}
