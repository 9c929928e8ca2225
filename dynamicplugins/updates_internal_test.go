package dynamicplugins

import (
	"context"
	"testing"

	"github.com/plugreg/plugreg/api"
)

// A reset that comes first (the stream's start is past the node's journal)
// delivers only what changed after the call: an instance the consumer was
// never told of, last changed at or before the call, existed then.
func TestFirstResetDeliversOnlyWhatChangedAfterTheCall(t *testing.T) {
	out := make(chan *PluginUpdateEvent, 8)
	u := &updates{ptype: PluginTypeCSINode, out: out, now: 5, view: map[instanceKey]*api.PluginInfo{}, r: &clusterRegistry{}}
	before := &api.PluginInfo{Type: PluginTypeCSINode, Name: "ebs", AllocID: "a1", ModifyIndex: 3}
	after := &api.PluginInfo{Type: PluginTypeCSINode, Name: "ebs", AllocID: "a2", ModifyIndex: 7}
	if !u.take(context.Background(), &api.Event{Index: 9, EventType: api.EventReset, Plugins: []*api.PluginInfo{before, after}}) {
		t.Fatal("take ended the subscription")
	}
	close(out)
	var got []string
	for ev := range out {
		got = append(got, string(ev.EventType)+" "+ev.Info.AllocID)
	}
	if len(got) != 1 || got[0] != "registered a2" {
		t.Fatalf("delivered %v, want only [registered a2]", got)
	}
	if len(u.view) != 2 {
		t.Fatalf("view holds %d instances, want both", len(u.view))
	}
}

// An expired instance (a plugreg lease ran out) is gone to the seed's
// consumer: a deregistration.
func TestExpiredDeliveredAsDeregistered(t *testing.T) {
	out := make(chan *PluginUpdateEvent, 1)
	p := &api.PluginInfo{Type: PluginTypeCSINode, Name: "ebs", AllocID: "a1", ModifyIndex: 6}
	u := &updates{ptype: PluginTypeCSINode, out: out, now: 5, view: map[instanceKey]*api.PluginInfo{keyOf(p): p}, r: &clusterRegistry{}}
	if !u.take(context.Background(), &api.Event{Index: 8, EventType: api.EventExpired, Info: p}) {
		t.Fatal("take ended the subscription")
	}
	if ev := <-out; ev.EventType != EventTypeDeregistered || ev.Info.AllocID != "a1" {
		t.Fatalf("delivered %s %s, want deregistered a1", ev.EventType, ev.Info.AllocID)
	}
	if len(u.view) != 0 {
		t.Fatal("the expired instance is still in the view")
	}
}
