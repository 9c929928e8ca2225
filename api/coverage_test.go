package api

import (
	"reflect"
	"testing"
)

func TestNewCoverage(t *testing.T) {
	members := []Member{
		{Name: "s1", Role: RoleServer, Status: "alive"},
		{Name: "c1", Role: RoleClient, Status: "alive"},
		{Name: "c2", Role: RoleClient, Status: "alive"},
		{Name: "c3", Role: RoleClient, Status: "failed"}, // dead, not reaped
		{Name: "c4", Role: RoleClient, Status: "failed"}, // dead, nothing left
		{Name: "c5", Role: RoleClient, Status: "left"},
	}
	inst := func(typ, node string) *PluginInfo {
		return &PluginInfo{Type: typ, Name: "p", AllocID: node + typ, NodeID: node}
	}
	plugins := []*PluginInfo{
		inst("csi", "c1"), inst("csi", "c1"), inst("csi", "s1"), inst("csi", "c3"),
		inst("csi", "c5"), inst("csi", "gone"), inst("csi", ""), inst("dra", "c2"),
	}
	cases := []struct {
		name, typ, role string
		want            Coverage
	}{
		{"every member", "csi", "", Coverage{
			Type: "csi", Nodes: 3, Covered: []string{"c1", "s1"}, Missing: []string{"c2"}, Suspect: []string{"c3"},
			Orphaned: []string{"c5", "gone"}, OrphanedInstances: 3,
		}},
		{"clients only", "csi", RoleClient, Coverage{
			Type: "csi", Role: RoleClient, Nodes: 2, Covered: []string{"c1"}, Missing: []string{"c2"}, Suspect: []string{"c3"},
			Orphaned: []string{"c5", "gone"}, OrphanedInstances: 3,
		}},
		{"servers only", "dra", RoleServer, Coverage{
			Type: "dra", Role: RoleServer, Nodes: 1, Covered: []string{}, Missing: []string{"s1"}, Suspect: []string{}, Orphaned: []string{},
		}},
		{"unknown type", "x", "", Coverage{
			Type: "x", Nodes: 3, Covered: []string{}, Missing: []string{"c1", "c2", "s1"}, Suspect: []string{}, Orphaned: []string{},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ps []*PluginInfo
			for _, p := range plugins {
				if p.Type == tc.typ {
					ps = append(ps, p)
				}
			}
			got := NewCoverage(tc.typ, tc.role, members, ps)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if n := got.Count("covered") + got.Count("missing"); n > got.Nodes {
				t.Fatalf("covered+missing %d > nodes %d", n, got.Nodes)
			}
		})
	}
}

func TestValidateCoverageRole(t *testing.T) {
	for role, ok := range map[string]bool{"": true, RoleClient: true, RoleServer: true, "voter": false} {
		if err := ValidateCoverageRole(role); (err == nil) != ok {
			t.Errorf("role %q: %v", role, err)
		}
	}
}

// A live node whose every instance of the type is suspect (its probes
// time out) covers nothing: it is Suspect; one passing instance beside a
// suspect one covers it.
func TestCoverageCountsSuspectInstances(t *testing.T) {
	members := []Member{{Name: "c1", Role: RoleClient, Status: "alive"}, {Name: "c2", Role: RoleClient, Status: "alive"}}
	sick := &InstanceHealth{Status: HealthSuspect, Check: CheckProbe}
	plugins := []*PluginInfo{
		{Type: "csi", Name: "p", AllocID: "a1", NodeID: "c1", Health: sick},
		{Type: "csi", Name: "p", AllocID: "a2", NodeID: "c2", Health: sick},
		{Type: "csi", Name: "q", AllocID: "a3", NodeID: "c2"},
	}
	got := NewCoverage("csi", "", members, plugins)
	want := Coverage{Type: "csi", Nodes: 2, Covered: []string{"c2"}, Missing: []string{}, Suspect: []string{"c1"}, Orphaned: []string{}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
