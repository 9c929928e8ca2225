package pluginpb

import (
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"google.golang.org/protobuf/proto"
)

// Every event type has a kind and comes back from it; an unknown one maps
// to UNSPECIFIED and back to "".
func TestEventKindsRoundTrip(t *testing.T) {
	for _, typ := range []api.EventType{api.EventRegistered, api.EventUpdated, api.EventDeregistered, api.EventReset, api.EventHeartbeat, api.EventExpired, api.EventHealth, api.EventError} {
		k := KindOf(typ)
		if k == EventKind_EVENT_KIND_UNSPECIFIED {
			t.Errorf("%s has no kind", typ)
		}
		if got := k.APIType(); got != typ {
			t.Errorf("%s -> %v -> %q", typ, k, got)
		}
	}
	if k := KindOf("renamed"); k != EventKind_EVENT_KIND_UNSPECIFIED || k.APIType() != "" {
		t.Errorf("unknown type -> %v -> %q", k, k.APIType())
	}
}

// The error that ends a stream keeps its code and message through the
// generated (vtprotobuf) encoding the Go client decodes.
func TestStreamErrorRoundTrip(t *testing.T) {
	ev := &api.Event{EventType: api.EventError, Error: &api.StreamError{Code: api.CodeACLNotFound, Message: "plugreg: ACL token not found"}}
	b, err := FromEvent(ev).MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	var back Event
	if err := back.UnmarshalVT(b); err != nil {
		t.Fatal(err)
	}
	got := back.API()
	if got.EventType != api.EventError || got.Index != 0 || got.Error == nil || *got.Error != *ev.Error {
		t.Fatalf("%+v (error %+v), want %+v", got, got.Error, ev.Error)
	}
}

// A plugin converts to protobuf and back unchanged, its TTL and health
// included; no TTL or health stays none.
func TestPluginRoundTrip(t *testing.T) {
	suspect := &api.InstanceHealth{Status: api.HealthSuspect, Check: api.CheckProbe, Reason: "slow", LastSeen: time.Date(2026, 11, 26, 1, 2, 3, 4, time.UTC)}
	for i, ttl := range []time.Duration{0, 1500 * time.Millisecond, 24 * time.Hour} {
		p := &api.PluginInfo{Type: "t", Name: "n", AllocID: "a", Version: "1", NodeID: "h1",
			ConnectionInfo: &api.ConnectionInfo{Address: "10.0.0.1:9"}, Options: map[string]string{"k": "v"},
			TTL: api.Duration(ttl), CreateIndex: 3, ModifyIndex: 4}
		if i == 1 {
			p.Health = suspect.Copy()
		}
		b, err := proto.Marshal(FromPlugin(p))
		if err != nil {
			t.Fatal(err)
		}
		var back PluginInfo
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got := back.API()
		if !api.SameContent(got, p) || got.CreateIndex != 3 || got.ModifyIndex != 4 {
			t.Errorf("ttl %s: %+v, want %+v", ttl, got, p)
		}
	}
}

func TestMaskedKind(t *testing.T) {
	const (
		reg   = uint32(EventKind_EVENT_KIND_REGISTERED)
		dereg = uint32(EventKind_EVENT_KIND_DEREGISTERED)
		exp   = uint32(EventKind_EVENT_KIND_EXPIRED)
		upd   = uint32(EventKind_EVENT_KIND_UPDATED)
		hlth  = uint32(EventKind_EVENT_KIND_HEALTH)
	)
	cases := []struct {
		name string
		mask uint32
		kind EventKind
		want EventKind
		ok   bool
	}{
		{"asked for", reg, EventKind_EVENT_KIND_REGISTERED, EventKind_EVENT_KIND_REGISTERED, true},
		{"not asked for", dereg, EventKind_EVENT_KIND_REGISTERED, 0, false},
		{"an expiry, asked for", exp, EventKind_EVENT_KIND_EXPIRED, EventKind_EVENT_KIND_EXPIRED, true},
		{"an expiry to a mask that knows only deregistrations", dereg, EventKind_EVENT_KIND_EXPIRED, EventKind_EVENT_KIND_DEREGISTERED, true},
		{"an expiry to a mask with both", dereg | exp, EventKind_EVENT_KIND_EXPIRED, EventKind_EVENT_KIND_EXPIRED, true},
		{"an expiry to a mask with neither", reg, EventKind_EVENT_KIND_EXPIRED, 0, false},
		{"a deregistration to a mask of expiries only", exp, EventKind_EVENT_KIND_DEREGISTERED, 0, false},
		{"a health change, asked for", hlth, EventKind_EVENT_KIND_HEALTH, EventKind_EVENT_KIND_HEALTH, true},
		{"a health change to a mask that knows only updates", upd, EventKind_EVENT_KIND_HEALTH, EventKind_EVENT_KIND_UPDATED, true},
		{"a health change to a mask with neither", reg, EventKind_EVENT_KIND_HEALTH, 0, false},
		{"a heartbeat, always", 0, EventKind_EVENT_KIND_HEARTBEAT, EventKind_EVENT_KIND_HEARTBEAT, true},
		{"a reset, always", 0, EventKind_EVENT_KIND_RESET, EventKind_EVENT_KIND_RESET, true},
		{"a kind from a newer agent, passed on", 0, EventKind(128), EventKind(128), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := MaskedKind(tc.mask, tc.kind)
			if ok != tc.ok || (ok && got != tc.want) {
				t.Fatalf("MaskedKind(%b, %v) = %v, %v; want %v, %v", tc.mask, tc.kind, got, ok, tc.want, tc.ok)
			}
		})
	}
}
