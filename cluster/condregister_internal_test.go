package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

// A node-bound caller's registration (backend.WithIfNodeID) reaches the
// log as fsm.ConditionalRegisterCommand only while every server of the
// configuration says it applies it; with a server that does not (here a
// non-voter gossip does not know, as an older release's server would
// be), it is a plain registration whose condition this server checks
// against its replica first, so the take-over is still refused and the
// node's own registrations go on through the upgrade. A caller bound to
// no node registers plainly throughout.
func TestConditionalRegisterOnlyWhenEveryServerKnowsIt(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	entryType := func(t *testing.T, index uint64) fsm.CommandType {
		t.Helper()
		var l raft.Log
		if err := s.logs.GetLog(index, &l); err != nil {
			t.Fatalf("entry %d: %v", index, err)
		}
		return fsm.CommandType(l.Data[0])
	}
	inst := func(node, version string) *api.PluginInfo {
		return &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a-" + node, NodeID: node, Version: version,
			ConnectionInfo: &api.ConnectionInfo{Address: node + ":9000"}}
	}
	bound := backend.WithIfNodeID(ctx, "host1")
	takeOver := inst("host2", "1")
	takeOver.NodeID = "host1"
	for _, phase := range []struct {
		name       string
		oldServer  bool
		wantBound  fsm.CommandType
		wantPlain  fsm.CommandType
		generation string
	}{
		{"every server knows it", false, fsm.ConditionalRegisterCommand, fsm.RegisterProtoCommand, "1"},
		{"an older server remains", true, fsm.RegisterCommand, fsm.RegisterCommand, "2"},
		{"the older server left", false, fsm.ConditionalRegisterCommand, fsm.RegisterProtoCommand, "3"},
	} {
		t.Run(phase.name, func(t *testing.T) {
			if phase.oldServer {
				if err := s.raft.AddNonvoter("old", "127.0.0.1:1", 0, 10*time.Second).Error(); err != nil {
					t.Fatal(err)
				}
			} else if err := s.raft.RemoveServer("old", 0, 10*time.Second).Error(); err != nil {
				t.Fatal(err)
			}
			s.oldest.Store(nil) // what serverBelow remembers is a second old at most
			res, err := s.register(bound, inst("host1", phase.generation))
			if err != nil {
				t.Fatalf("host1 registering its own: %v", err)
			}
			if got := entryType(t, res.Index); got != phase.wantBound {
				t.Errorf("a node-bound registration written as %s, want %s", got, phase.wantBound)
			}
			res, err = s.register(ctx, inst("host2", phase.generation))
			if err != nil {
				t.Fatalf("an unbound registration: %v", err)
			}
			if got := entryType(t, res.Index); got != phase.wantPlain {
				t.Errorf("an unbound registration written as %s, want %s", got, phase.wantPlain)
			}
			if _, err := s.register(bound, takeOver); !errors.Is(err, api.ErrConflict) {
				t.Fatalf("host1 taking host2's instance over: %v, want a conflict", err)
			}
			if got := s.fsm.State().Instance("csi", "ebs", "a-host2"); got.NodeID != "host2" || got.Version != phase.generation {
				t.Fatalf("host2's instance after the refusal: %+v", got)
			}
		})
	}
}
