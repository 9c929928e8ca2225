package fsm

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
)

var seen = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func suspect(p *api.PluginInfo, check string) *api.PluginInfo {
	p.Health = &api.InstanceHealth{Status: api.HealthSuspect, Check: check, Reason: "timed out", LastSeen: seen}
	return p
}

func nodeSuspect(node string) *NodeHealthRequest {
	return &NodeHealthRequest{NodeID: node, Suspect: true, Reason: "node failed in gossip", LastSeen: seen}
}

func nodeAlive(node string) *NodeHealthRequest { return &NodeHealthRequest{NodeID: node} }

// Health is replicated state with its own event: a change of health only
// is a health event that keeps the instance's place in the recency list
// and its CreateIndex; a node's mark covers the node's instances that
// carry none and is cleared only where it was put; another checker's
// mark stands.
func TestHealth(t *testing.T) {
	type step struct {
		req    Request
		result api.Result
		events string
	}
	cases := []struct {
		name      string
		steps     []step
		instances string // Instances("csi", "ebs") at the end
		suspect   string // the suspect ones, with their checks
	}{
		{
			name: "a probe marks the older instance suspect: it stays second",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(plugin("csi", "ebs", "a2")), api.ResultRegistered, "registered:a2@2>a2"},
				{reg(suspect(plugin("csi", "ebs", "a1"), api.CheckProbe)), api.ResultUpdated, "health:a1@3>a2"},
				{reg(suspect(plugin("csi", "ebs", "a1"), api.CheckProbe)), api.ResultUnchanged, ""},
				{reg(plugin("csi", "ebs", "a1")), api.ResultUpdated, "health:a1@5>a2"},
			},
			instances: "a2@2 a1@5",
		},
		{
			name: "a change beside the health is an update",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(plugin("csi", "ebs", "a2")), api.ResultRegistered, "registered:a2@2>a2"},
				{reg(withVersion(suspect(plugin("csi", "ebs", "a1"), api.CheckProbe), "2")), api.ResultUpdated, "updated:a1@3>a1"},
			},
			instances: "a1@3 a2@2",
			suspect:   "a1:probe",
		},
		{
			name: "a node's mark and its clearing touch only that node's instances",
			steps: []step{
				{reg(onNode(plugin("csi", "ebs", "a1"), "n1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(onNode(plugin("csi", "ebs", "a2"), "n2")), api.ResultRegistered, "registered:a2@2>a2"},
				{nodeSuspect("n1"), ResultHealth, "health:a1@3>a2"},
				{nodeSuspect("n1"), api.ResultUnchanged, ""},
				{nodeAlive("n1"), ResultHealth, "health:a1@5>a2"},
				{nodeAlive("n1"), api.ResultUnchanged, ""},
				{nodeSuspect("n3"), api.ResultUnchanged, ""},
			},
			instances: "a2@2 a1@5",
		},
		{
			name: "a probe's mark stands through the node's mark and its clearing",
			steps: []step{
				{reg(suspect(onNode(plugin("csi", "ebs", "a1"), "n1"), api.CheckProbe)), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(onNode(plugin("csi", "ebs", "a2"), "n1")), api.ResultRegistered, "registered:a2@2>a2"},
				{nodeSuspect("n1"), ResultHealth, "health:a2@3>a2"},
				{nodeAlive("n1"), ResultHealth, "health:a2@4>a2"},
			},
			instances: "a2@4 a1@1",
			suspect:   "a1:probe",
		},
		{
			name: "the node's agent clears the node's mark by registering again",
			steps: []step{
				{reg(onNode(plugin("csi", "ebs", "a1"), "n1")), api.ResultRegistered, "registered:a1@1>a1"},
				{nodeSuspect("n1"), ResultHealth, "health:a1@2>a1"},
				{reg(onNode(plugin("csi", "ebs", "a1"), "n1")), api.ResultUpdated, "health:a1@3>a1"},
				{nodeAlive("n1"), api.ResultUnchanged, ""},
			},
			instances: "a1@3",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			for i, st := range tc.steps {
				before := len(a.rec.events)
				res := a.apply(st.req)
				if res.Err != nil || res.Result != st.result {
					t.Fatalf("step %d: result %q (%v), want %q", i, res.Result, res.Err, st.result)
				}
				if got := renderEvents(a.rec.events[before:]); got != st.events {
					t.Fatalf("step %d: events %q, want %q", i, got, st.events)
				}
			}
			list := a.fsm.State().Instances("csi", "ebs")
			if got := allocs(list); got != tc.instances {
				t.Fatalf("instances %q, want %q", got, tc.instances)
			}
			var sus []string
			for _, p := range list {
				if p.Suspect() {
					sus = append(sus, p.AllocID+":"+p.Health.Check)
				}
				if p.CreateIndex > 2 {
					t.Fatalf("%s: CreateIndex %d: a health change made it anew", p.AllocID, p.CreateIndex)
				}
			}
			if got := strings.Join(sus, " "); got != tc.suspect {
				t.Fatalf("suspect %q, want %q", got, tc.suspect)
			}
		})
	}
}

// Health reads back from a snapshot as it was, byte-identical.
func TestHealthIsReplicatedState(t *testing.T) {
	a := newApplier(t)
	a.apply(reg(suspect(plugin("csi", "ebs", "a1"), "external")))
	a.apply(reg(plugin("csi", "ebs", "a2")))
	snap := a.snapshot()
	b := New(nil)
	if err := b.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	p := b.State().Instance("csi", "ebs", "a1")
	if p == nil || !api.SameHealth(p.Health, suspect(plugin("csi", "ebs", "a1"), "external").Health) {
		t.Fatalf("restored a1: %+v", p)
	}
	if p := b.State().Instance("csi", "ebs", "a2"); p == nil || p.Health != nil {
		t.Fatalf("restored a2: %+v", p)
	}
	var again bytes.Buffer
	if err := WriteState(&again, b.State()); err != nil || !bytes.Equal(again.Bytes(), snap) {
		t.Fatalf("snapshot with health not byte-identical after a round trip (%v)", err)
	}
}

// A health change keeps the instance's place in its recency list but
// gives it the change's ModifyIndex, so a list is not in decreasing
// ModifyIndex order once an instance behind the front changed health (by
// its registrant, or by the leader's node mark, which gives every
// instance of a node one index). Such a state snapshots and reads back as
// it was, recency order included: the snapshot checks refused it once,
// and raft could then never take a snapshot again.
func TestSnapshotAfterAHealthChangeBehindTheFront(t *testing.T) {
	a := newApplier(t)
	a1, a2, b1, b2 := plugin("csi", "ebs", "a1"), plugin("csi", "ebs", "a2"), plugin("csi", "efs", "b1"), plugin("csi", "efs", "b2")
	b1.NodeID, b2.NodeID = "n9", "n9"
	for _, p := range []*api.PluginInfo{a1, a2, b1, b2} {
		a.apply(reg(p))
	}
	a.apply(reg(suspect(plugin("csi", "ebs", "a1"), "external"))) // a1 behind a2, newer index
	a.apply(&NodeHealthRequest{NodeID: "n9", Suspect: true, Reason: "failed", LastSeen: time.Unix(1e9, 0).UTC()})
	st := a.fsm.State()
	if st.Instance("csi", "ebs", "a1").ModifyIndex <= st.Newest("csi", "ebs").ModifyIndex {
		t.Fatal("the test needs a1 behind the front with a newer ModifyIndex")
	}
	var snap bytes.Buffer
	if err := WriteState(&snap, st); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	back, err := ReadState(bytes.NewReader(snap.Bytes()))
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	for _, name := range []string{"ebs", "efs"} {
		var want, got []string
		for _, p := range st.Instances("csi", name) {
			want = append(want, p.AllocID)
		}
		for _, p := range back.Instances("csi", name) {
			got = append(got, p.AllocID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s read back in order %v, want %v", name, got, want)
		}
	}
	var again bytes.Buffer
	if err := WriteState(&again, back); err != nil || !bytes.Equal(again.Bytes(), snap.Bytes()) {
		t.Fatalf("not byte-identical after a round trip (%v)", err)
	}
}

func TestHealthValidation(t *testing.T) {
	passing := plugin("csi", "ebs", "a1")
	passing.Health = &api.InstanceHealth{Status: api.HealthPassing, Check: "probe"}
	noCheck := plugin("csi", "ebs", "a1")
	noCheck.Health = &api.InstanceHealth{Status: api.HealthSuspect}
	long := suspect(plugin("csi", "ebs", "a1"), "probe")
	long.Health.Reason = strings.Repeat("x", api.MaxHealthReasonBytes+1)
	control := suspect(plugin("csi", "ebs", "a1"), "probe")
	control.Health.Reason = "bad\x00reason"
	cases := []struct {
		name string
		req  Request
		want error // nil: valid
	}{
		{"suspect", reg(suspect(plugin("csi", "ebs", "a1"), "probe")), nil},
		{"passing spelled out", reg(passing), api.ErrInvalid},
		{"no check", reg(noCheck), api.ErrInvalid},
		{"reason too long", reg(long), api.ErrTooLarge},
		{"reason with a control character", reg(control), api.ErrInvalid},
		{"node mark", nodeSuspect("n1"), nil},
		{"node clearing", nodeAlive("n1"), nil},
		{"node clearing with a reason", &NodeHealthRequest{NodeID: "n1", Reason: "x"}, api.ErrInvalid},
		{"node without a name", &NodeHealthRequest{Suspect: true, Reason: "x"}, api.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeCommand(tc.req)
			if (tc.want == nil) != (err == nil) || (err != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("encode: %v, want %v", err, tc.want)
			}
		})
	}
}
