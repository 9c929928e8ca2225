package check

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

type fsmEvents struct{ evs []fsm.Event }

func (r *fsmEvents) Applied(_ *fsm.State, evs []fsm.Event) { r.evs = append(r.evs, evs...) }
func (r *fsmEvents) Restored(*fsm.State)                   {}

// The model replays health as the FSM applies it: the same result and the
// same events, in the same order, for registrations that change health
// only, and for a node's marks and their clearing (the ground-truth
// checker compares the two on every entry of a run).
func TestModelAgreesWithTheFSMOnHealth(t *testing.T) {
	plugin := func(name, alloc, node, check string) *fsm.RegisterRequest {
		p := &api.PluginInfo{Type: "t", Name: name, AllocID: alloc, Version: "v", NodeID: node,
			ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}
		if check != "" {
			p.Health = &api.InstanceHealth{Status: api.HealthSuspect, Check: check, LastSeen: time.Unix(1, 0).UTC()}
		}
		return &fsm.RegisterRequest{Plugin: p}
	}
	steps := []fsm.Request{
		plugin("x", "a1", "h1", ""),
		plugin("x", "a2", "h2", ""),
		plugin("y", "b2", "h1", ""),
		plugin("y", "b1", "h1", ""),
		&fsm.NodeHealthRequest{NodeID: "h1", Suspect: true, Reason: "failed", LastSeen: time.Unix(2, 0).UTC()},
		plugin("x", "a1", "h1", api.CheckProbe),
		&fsm.NodeHealthRequest{NodeID: "h1", Suspect: true, Reason: "failed", LastSeen: time.Unix(2, 0).UTC()},
		&fsm.NodeHealthRequest{NodeID: "h1"},
		plugin("x", "a1", "h1", ""),
		plugin("x", "a1", "h1", ""),
		&fsm.NodeHealthRequest{NodeID: "h9", Suspect: true, Reason: "failed"},
	}
	sink := &fsmEvents{}
	f := fsm.New(sink)
	model := NewRegistry()
	for i, req := range steps {
		index := uint64(i + 1)
		cmd, err := fsm.EncodeCommand(req)
		if err != nil {
			t.Fatal(err)
		}
		before := len(sink.evs)
		res := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: cmd}).(*fsm.ApplyResult)
		raw, _ := json.Marshal(req)
		got, mevs := model.Apply(index, req.CommandType().String(), raw)
		if string(res.Result) != got {
			t.Fatalf("step %d (%s): the FSM answered %q, the model %q", i, req.CommandType(), res.Result, got)
		}
		var fe, me []string
		for _, e := range sink.evs[before:] {
			fe = append(fe, fmt.Sprintf("%s %s/%s@%d>%s", e.EventType, e.Info.Name, e.Info.AllocID, e.Info.ModifyIndex, e.Current.AllocID))
		}
		for _, e := range mevs {
			me = append(me, fmt.Sprintf("%s %s/%s@%d>%s", e.EventType, e.Info.Name, e.Info.Alloc, e.Info.ModifyIndex, e.Current.Alloc))
		}
		if strings.Join(fe, ", ") != strings.Join(me, ", ") {
			t.Fatalf("step %d (%s): the FSM's events\n  %v\nthe model's\n  %v", i, req.CommandType(), fe, me)
		}
	}
}
