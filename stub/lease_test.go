package stub_test

import (
	"context"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/stub"
)

// expiryRecorder is a plugin that knows expiries.
type expiryRecorder struct{ recorder }

func (r *expiryRecorder) Expired(_ context.Context, ev *api.Event) error { return r.add(ev) }

// An instance whose lease ran out reaches each plugin as it knows it: as
// "expired" to one whose mask asks for expiries, as "deregistered" to one
// whose mask asks only for deregistrations (what a plugin built before
// leases sends), through the agent's plugin socket.
func TestExpiryReachesPluginsAsTheyKnowIt(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	before := &recorder{}
	knows := &expiryRecorder{}
	e.startStub(before, stub.WithPluginName("before"), stub.WithEndpoint("/run/b.sock"), stub.WithEventMask(stub.Deregistered, "leased"))
	e.startStub(knows, stub.WithPluginName("knows"), stub.WithEndpoint("/run/k.sock"), stub.WithEventMask(stub.AllEvents, "leased"))
	e.c.Eventually(10*time.Second, "both plugins listed", func() bool {
		return e.listedEverywhere("demo", "before", 1) && e.listedEverywhere("demo", "knows", 1)
	})
	reg := e.c.Register(e.c.Nodes[2], &api.PluginInfo{Type: "leased", Name: "l", AllocID: "a1", NodeID: "elsewhere",
		ConnectionInfo: &api.ConnectionInfo{Address: "10.0.0.1:1"}, TTL: api.Duration(time.Second)})
	e.c.Eventually(60*time.Second, "the expiry delivered to both", func() bool {
		return len(before.got()) == 1 && len(knows.got()) == 2
	})
	if ev := before.got()[0]; ev.EventType != api.EventDeregistered || ev.Info.AllocID != "a1" || ev.Index <= reg.Index {
		t.Fatalf("a plugin that knows only deregistrations got %s %+v at %d", ev.EventType, ev.Info, ev.Index)
	}
	got := knows.got()
	if got[0].EventType != api.EventRegistered || got[1].EventType != api.EventExpired || got[1].Index != before.got()[0].Index {
		t.Fatalf("a plugin that knows expiries got %v", describeEvents(got))
	}
}
