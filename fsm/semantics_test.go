package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/api"
)

func withVersion(p *api.PluginInfo, v string) *api.PluginInfo { p.Version = v; return p }
func onNode(p *api.PluginInfo, n string) *api.PluginInfo      { p.NodeID = n; return p }

// allocs renders a recency list as "alloc@modifyIndex ..." for comparison.
func allocs(list []*api.PluginInfo) string {
	var parts []string
	for _, p := range list {
		parts = append(parts, fmt.Sprintf("%s@%d", p.AllocID, p.ModifyIndex))
	}
	return strings.Join(parts, " ")
}

// events renders events as "type:alloc@index>current ..." where current is
// the newest alloc after the change, or "-" when the name is gone.
func renderEvents(evs []Event) string {
	var parts []string
	for _, e := range evs {
		cur := "-"
		if e.Current != nil {
			cur = e.Current.AllocID
		}
		parts = append(parts, fmt.Sprintf("%s:%s@%d>%s", e.EventType, e.Info.AllocID, e.Index, cur))
	}
	return strings.Join(parts, " ")
}

func TestRegistrySemantics(t *testing.T) {
	type step struct {
		req    Request
		result api.Result
		events string // events of this step only
	}
	cases := []struct {
		name  string
		steps []step
		// expectations on the final state
		list      string // ListPlugins("csi")
		instances string // Instances("csi", "ebs")
		types     string
	}{
		{
			name: "register new instance goes to the front",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(plugin("csi", "ebs", "a2")), api.ResultRegistered, "registered:a2@2>a2"},
			},
			list: "a2@2", instances: "a2@2 a1@1", types: "csi",
		},
		{
			name: "identical re-register is a no-op without event",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(plugin("csi", "ebs", "a2")), api.ResultRegistered, "registered:a2@2>a2"},
				{reg(plugin("csi", "ebs", "a1")), api.ResultUnchanged, ""},
			},
			list: "a2@2", instances: "a2@2 a1@1", types: "csi",
		},
		{
			name: "changed re-register updates in place and moves to front",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(plugin("csi", "ebs", "a2")), api.ResultRegistered, "registered:a2@2>a2"},
				{reg(withVersion(plugin("csi", "ebs", "a1"), "2.0.0")), api.ResultUpdated, "updated:a1@3>a1"},
			},
			list: "a1@3", instances: "a1@3 a2@2", types: "csi",
		},
		{
			name: "deregister unknown type, name or alloc is a no-op without event",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{dereg("device", "ebs", "a1"), api.ResultAbsent, ""},
				{dereg("csi", "efs", "a1"), api.ResultAbsent, ""},
				{dereg("csi", "ebs", "zz"), api.ResultAbsent, ""},
			},
			list: "a1@1", instances: "a1@1", types: "csi",
		},
		{
			name: "deregister the newest: an older one takes over and Current says so",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(plugin("csi", "ebs", "a2")), api.ResultRegistered, "registered:a2@2>a2"},
				{dereg("csi", "ebs", "a2"), api.ResultDeregistered, "deregistered:a2@3>a1"},
			},
			list: "a1@1", instances: "a1@1", types: "csi",
		},
		{
			name: "last instance removes the name, last name removes the type",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(plugin("device", "gpu", "g1")), api.ResultRegistered, "registered:g1@2>g1"},
				{dereg("csi", "ebs", "a1"), api.ResultDeregistered, "deregistered:a1@3>-"},
			},
			list: "", instances: "", types: "device",
		},
		{
			name: "list is the newest of every name, sorted by name",
			steps: []step{
				{reg(plugin("csi", "zfs", "z1")), api.ResultRegistered, "registered:z1@1>z1"},
				{reg(plugin("csi", "ebs", "e1")), api.ResultRegistered, "registered:e1@2>e1"},
				{reg(plugin("csi", "gce", "g1")), api.ResultRegistered, "registered:g1@3>g1"},
				{reg(plugin("csi", "ebs", "e2")), api.ResultRegistered, "registered:e2@4>e2"},
			},
			list: "e2@4 g1@3 z1@1", instances: "e2@4 e1@2", types: "csi",
		},
		{
			name: "deregister node removes every instance on it in one entry",
			steps: []step{
				{reg(onNode(plugin("csi", "ebs", "a1"), "n1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(onNode(plugin("csi", "ebs", "a2"), "n2")), api.ResultRegistered, "registered:a2@2>a2"},
				{reg(onNode(plugin("csi", "ebs", "a3"), "n1")), api.ResultRegistered, "registered:a3@3>a3"},
				{reg(onNode(plugin("csi", "gce", "g1"), "n1")), api.ResultRegistered, "registered:g1@4>g1"},
				{&DeregisterNodeRequest{NodeID: "n1"}, api.ResultDeregistered,
					"deregistered:a3@5>a2 deregistered:a1@5>a2 deregistered:g1@5>-"},
				{&DeregisterNodeRequest{NodeID: "n1"}, api.ResultAbsent, ""},
			},
			list: "a2@2", instances: "a2@2", types: "csi",
		},
		{
			name: "types are independent namespaces",
			steps: []step{
				{reg(plugin("csi", "ebs", "a1")), api.ResultRegistered, "registered:a1@1>a1"},
				{reg(plugin("device", "ebs", "a1")), api.ResultRegistered, "registered:a1@2>a1"},
				{dereg("device", "ebs", "a1"), api.ResultDeregistered, "deregistered:a1@3>-"},
			},
			list: "a1@1", instances: "a1@1", types: "csi",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			for i, st := range tc.steps {
				before := len(a.rec.events)
				res := a.apply(st.req)
				if res.Result != st.result {
					t.Fatalf("step %d: result %q, want %q", i, res.Result, st.result)
				}
				if res.Index != a.index {
					t.Fatalf("step %d: index %d, want %d", i, res.Index, a.index)
				}
				if got := renderEvents(a.rec.events[before:]); got != st.events {
					t.Fatalf("step %d: events %q, want %q", i, got, st.events)
				}
			}
			s := a.fsm.State()
			if s.Index() != a.index {
				t.Errorf("state index %d, want %d", s.Index(), a.index)
			}
			if got := allocs(s.List("csi")); got != tc.list {
				t.Errorf("List(csi) = %q, want %q", got, tc.list)
			}
			if got := allocs(s.Instances("csi", "ebs")); got != tc.instances {
				t.Errorf("Instances(csi, ebs) = %q, want %q", got, tc.instances)
			}
			if got := strings.Join(s.Types(), " "); got != tc.types {
				t.Errorf("Types() = %q, want %q", got, tc.types)
			}
		})
	}
}

func TestUpdateKeepsCreateIndex(t *testing.T) {
	a := newApplier(t)
	a.apply(reg(plugin("csi", "ebs", "a1")))
	a.apply(reg(withVersion(plugin("csi", "ebs", "a1"), "2")))
	p := a.fsm.State().Instance("csi", "ebs", "a1")
	if p.CreateIndex != 1 || p.ModifyIndex != 2 || p.Version != "2" {
		t.Fatalf("got create %d modify %d version %q, want 1, 2, 2", p.CreateIndex, p.ModifyIndex, p.Version)
	}
}

// The registry keeps its own copy: changing the request after it was
// applied, or the instance handed out, must not change the state.
func TestStateOwnsItsCopies(t *testing.T) {
	a := newApplier(t)
	p := plugin("csi", "ebs", "a1")
	p.Options = map[string]string{"k": "v"}
	a.apply(reg(p))
	p.Options["k"] = "changed"
	p.ConnectionInfo.SocketPath = "/elsewhere"
	got := a.fsm.State().Instance("csi", "ebs", "a1").Copy()
	if got.Options["k"] != "v" || got.ConnectionInfo.SocketPath != "/run/ebs.sock" {
		t.Fatalf("state changed with the caller's struct: %+v", got)
	}
	got.Options["k"] = "x"
	if a.fsm.State().Instance("csi", "ebs", "a1").Options["k"] != "v" {
		t.Fatal("a copy shares its Options map with the state")
	}
}

func TestValidation(t *testing.T) {
	long := strings.Repeat("x", api.MaxFieldBytes+1)
	manyOpts := map[string]string{}
	for i := 0; i <= api.MaxOptions; i++ {
		manyOpts[fmt.Sprint(i)] = "v"
	}
	bigOpts := map[string]string{}
	for i := 0; i < 10; i++ {
		bigOpts[fmt.Sprint(i)] = strings.Repeat("v", 8000)
	}
	mod := func(f func(p *api.PluginInfo)) *api.PluginInfo { p := plugin("csi", "ebs", "a1"); f(p); return p }
	cases := []struct {
		name string
		req  Request
		want error // nil: valid
	}{
		{"valid", reg(plugin("csi", "ebs", "a1")), nil},
		{"valid with address only", reg(mod(func(p *api.PluginInfo) { p.ConnectionInfo = &api.ConnectionInfo{Address: "10.0.0.1:9000"} })), nil},
		{"nil plugin", &RegisterRequest{}, api.ErrInvalid},
		{"empty type", reg(plugin("", "ebs", "a1")), api.ErrInvalid},
		{"empty name", reg(plugin("csi", "", "a1")), api.ErrInvalid},
		{"empty alloc", reg(plugin("csi", "ebs", "")), api.ErrInvalid},
		{"no connection info", reg(mod(func(p *api.PluginInfo) { p.ConnectionInfo = nil })), api.ErrInvalid},
		{"empty connection info", reg(mod(func(p *api.PluginInfo) { p.ConnectionInfo = &api.ConnectionInfo{} })), api.ErrInvalid},
		{"slash in name", reg(plugin("csi", "a/b", "a1")), api.ErrInvalid},
		{"control character", reg(plugin("csi", "a\nb", "a1")), api.ErrInvalid},
		{"invalid utf-8", reg(plugin("csi", "\xff", "a1")), api.ErrInvalid},
		{"long type", reg(plugin(long, "ebs", "a1")), api.ErrTooLarge},
		{"long version", reg(mod(func(p *api.PluginInfo) { p.Version = long })), api.ErrTooLarge},
		{"too many options", reg(mod(func(p *api.PluginInfo) { p.Options = manyOpts })), api.ErrTooLarge},
		{"over 64 KiB", reg(mod(func(p *api.PluginInfo) { p.Options = bigOpts })), api.ErrTooLarge},
		{"empty option key", reg(mod(func(p *api.PluginInfo) { p.Options = map[string]string{"": "v"} })), api.ErrInvalid},
		{"conditional register", &ConditionalRegisterRequest{Plugin: plugin("csi", "ebs", "a1"), IfNodeID: "n1"}, nil},
		{"conditional register without a condition", &ConditionalRegisterRequest{Plugin: plugin("csi", "ebs", "a1")}, api.ErrInvalid},
		{"conditional register of a bad plugin", &ConditionalRegisterRequest{Plugin: plugin("csi", "a/b", "a1"), IfNodeID: "n1"}, api.ErrInvalid},
		{"conditional register, bad node", &ConditionalRegisterRequest{Plugin: plugin("csi", "ebs", "a1"), IfNodeID: "n\x001"}, api.ErrInvalid},
		{"deregister empty alloc", dereg("csi", "ebs", ""), api.ErrInvalid},
		{"deregister empty type", dereg("", "ebs", "a1"), api.ErrInvalid},
		{"deregister node empty", &DeregisterNodeRequest{}, api.ErrInvalid},
		{"long request id", &DeregisterNodeRequest{NodeID: "n1", RequestID: strings.Repeat("r", api.MaxRequestIDLen+1)}, api.ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeCommand(tc.req)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errorsIs(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
}
