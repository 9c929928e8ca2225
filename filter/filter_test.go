package filter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
)

func plugins() []*api.PluginInfo {
	return []*api.PluginInfo{
		{Type: "csi", Name: "ebs", AllocID: "a1", Version: "1.2.0", NodeID: "n1",
			ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"},
			Options:        map[string]string{"zone": "eu-1", "tier": "gold"}, CreateIndex: 5, ModifyIndex: 9},
		{Type: "csi", Name: "nfs", AllocID: "a2", Version: "0.9.1", NodeID: "n2",
			ConnectionInfo: &api.ConnectionInfo{Address: "10.0.0.2:9000"}, TTL: api.Duration(30e9),
			Health:      &api.InstanceHealth{Status: api.HealthSuspect, Check: api.CheckProbe, Reason: "GetInfo timed out"},
			CreateIndex: 7, ModifyIndex: 7},
		{Type: "device", Name: "gpu", AllocID: "a3", NodeID: "n1",
			ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/gpu.sock"},
			Options:        map[string]string{"zone": "eu-2"}, CreateIndex: 11, ModifyIndex: 12},
	}
}

func names(ps []*api.PluginInfo) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

func TestFilterSelectsByEveryFieldKind(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`Type == "csi"`, "ebs,nfs"},
		{`Name != "ebs"`, "nfs,gpu"},
		{`NodeID == "n2" or NodeID == "n3"`, "nfs"},
		{`"f" in Name`, "nfs"},
		{`Name contains "f"`, "nfs"},
		{`Version matches "^1\\."`, "ebs"},
		{`Version is empty`, "gpu"},
		{`Options.zone == "eu-1"`, "ebs"},
		{`Options.tier != "gold"`, "nfs,gpu"}, // a missing key is not equal to anything
		{`zone in Options`, "ebs,gpu"},
		{`Options is empty`, "nfs"},
		{`any Options as k, v { v == "gold" }`, "ebs"},
		{`CreateIndex == 7 and ModifyIndex != 9`, "nfs"},
		{`ConnectionInfo.Address != ""`, "nfs"},
		{`TTL != 0`, "nfs"},
		{`not (Type == "csi")`, "gpu"},
		// Health: a passing instance (no Health) shows Status "passing".
		{`Health.Status == "suspect"`, "nfs"},
		{`Health.Status == "passing"`, "ebs,gpu"},
		{`Health.Status != "suspect" and Type == "csi"`, "ebs"},
		{`Health.Check == "probe"`, "nfs"},
		{`Health.Reason contains "timed out"`, "nfs"},
	} {
		f, err := Compile(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got, err := f.Plugins(context.Background(), plugins(), 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if names(got) != tc.want {
			t.Errorf("%s: got %q, want %q", tc.expr, names(got), tc.want)
		}
	}
}

func TestFilterRefusesBadExpressionsWithTheirPosition(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`Name ==`, "1:8 (7)"},
		{`Name == "a" andd Type == "b"`, "1:16 (15)"},
		{`Nmae == "a"`, `unknown field "Nmae"`},
		{`Name == "x" and Options.a.b == "c"`, `has no field "b"`},
		{`Name matches "("`, "missing closing )"},
		{`any Options as a { any Options as b { a == b } }`, "at most 256"},
		{strings.Repeat(" ", MaxBytes+1) + `Name == "a"`, "at most 4096"},
	} {
		_, err := Compile(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: got %v, want an error with %q", tc.expr, err, tc.want)
			continue
		}
		if !errors.Is(err, api.ErrInvalid) && !errors.Is(err, api.ErrTooLarge) {
			t.Errorf("%.40q: %v is not a refusal", tc.expr, err)
		}
	}
}

func TestFilterEvents(t *testing.T) {
	f, err := Compile(`Options.zone == "eu-1"`)
	if err != nil {
		t.Fatal(err)
	}
	ps := plugins()
	now := time.Now()
	if _, ok, _ := f.Event(&api.Event{Index: 3, EventType: api.EventRegistered, Info: ps[1]}, now); ok {
		t.Error("a change of another zone was delivered")
	}
	if ev, ok, _ := f.Event(&api.Event{Index: 3, EventType: api.EventDeregistered, Info: ps[0]}, now); !ok || ev.Info != ps[0] {
		t.Error("a matching change was not delivered as is")
	}
	if _, ok, _ := f.Event(&api.Event{Index: 3, EventType: api.EventHeartbeat}, now); !ok {
		t.Error("a heartbeat was held back")
	}
	reset := &api.Event{Index: 4, EventType: api.EventReset, Plugins: ps}
	ev, ok, _ := f.Event(reset, now)
	if !ok || names(ev.Plugins) != "ebs" || len(reset.Plugins) != 3 {
		t.Errorf("reset delivered %q (ok %v), shared reset left with %d", names(ev.Plugins), ok, len(reset.Plugins))
	}
}

// FuzzFilter: no expression, however hostile, panics the compiler or the
// evaluation, and Compile's refusals are all api refusals.
func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		`Name == "a"`, `Options.zone == "x" or not (CreateIndex > 3)`, `"a" in Options`,
		`any Options as k, v { k == "a" and v matches "b+" }`, `Options is not empty`,
		`ConnectionInfo is nil`, `CreateIndex == "x"`, `TTL == "1s"`, `Options.a.b == 1`,
		`all Options as k { k in Name }`, `/Options/zone == "a"`, `Name matches "("`,
		strings.Repeat("(", 200) + `Name == "a"` + strings.Repeat(")", 200),
	} {
		f.Add(s)
	}
	ps := append(plugins(), &api.PluginInfo{Type: "t", Name: "n", AllocID: "x"})
	f.Fuzz(func(t *testing.T, expr string) {
		flt, err := Compile(expr)
		if err != nil {
			if !errors.Is(err, api.ErrInvalid) && !errors.Is(err, api.ErrTooLarge) {
				t.Fatalf("%q: %v is not a refusal", expr, err)
			}
			return
		}
		for _, p := range ps {
			flt.Match(p)
		}
		flt.Event(&api.Event{EventType: api.EventReset, Plugins: ps}, time.Now())
	})
}
