package pluginpb

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"google.golang.org/protobuf/proto"
)

// benchEvent is an event as a watcher of a busy type receives it: a
// registration with the name's newest instance beside it.
func benchEvent(i int) *Event {
	p := &api.PluginInfo{Type: "csi", Name: "ebs.csi.example.com", AllocID: fmt.Sprintf("alloc-%06d", i), Version: "1.4.0", NodeID: "node-0042",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/plugins/csi.sock"}, Options: map[string]string{"zone": "eu-west-1a", "tier": "gold"},
		TTL: api.Duration(30 * time.Second), CreateIndex: uint64(i), ModifyIndex: uint64(i)}
	if i%3 == 0 {
		p.Health = &api.InstanceHealth{Status: api.HealthSuspect, Check: api.CheckProbe, Reason: "slow", LastSeen: time.Date(2026, 11, 26, 1, 2, 3, 4, time.UTC)}
	}
	return FromEvent(&api.Event{Index: uint64(i), EventType: api.EventRegistered, Info: p, Current: p})
}

// The generated decoder (UnmarshalVT, the Go client's) reads what the
// reflection-based library writes (the server's encoder) into the same
// message, for every kind of event and for a reset carrying many plugins,
// and refuses what it refuses.
func TestFastCodecAgreesWithProto(t *testing.T) {
	var msgs []*Event
	for i := 0; i < 6; i++ {
		msgs = append(msgs, benchEvent(i))
	}
	reset := &api.Event{Index: 9, EventType: api.EventReset}
	for i := 0; i < 5; i++ {
		reset.Plugins = append(reset.Plugins, benchEvent(i).GetInfo().API())
	}
	msgs = append(msgs, FromEvent(reset), FromEvent(&api.Event{Index: 10, EventType: api.EventHeartbeat}),
		FromEvent(&api.Event{Index: 11, EventType: api.EventDeregistered, Info: benchEvent(1).GetInfo().API()}))
	for i, m := range msgs {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Event
		if err := back.UnmarshalVT(want); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !proto.Equal(&back, m) {
			t.Errorf("message %d: UnmarshalVT gave %v, want %v", i, &back, m)
		}
	}
	// Bytes that are not an Event are refused by both.
	for _, bad := range [][]byte{{0xff}, {0x0a, 0x05, 0x01}, {0x12, 0x80}} {
		var a, b Event
		errA, errB := proto.Unmarshal(bad, &a), b.UnmarshalVT(bad)
		if (errA == nil) != (errB == nil) {
			t.Errorf("%x: proto says %v, UnmarshalVT says %v", bad, errA, errB)
		}
	}
}

func BenchmarkDecodeEvent(b *testing.B) {
	data, err := proto.Marshal(benchEvent(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var m Event
			if err := proto.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("vtproto", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var m Event
			if err := m.UnmarshalVT(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzUnmarshalVT: whatever bytes a server (or anything posing as one)
// sends, the generated decoder does not panic, and when both decoders
// accept the bytes the client reads the same event from both (the
// messages may differ in unknown fields, which the client ignores:
// vtprotobuf drops those inside a Duration or a Timestamp). They differ on one thing by design: proto.Unmarshal refuses
// a string that is not UTF-8, UnmarshalVT keeps its bytes.
func FuzzUnmarshalVT(f *testing.F) {
	for i := 0; i < 4; i++ {
		b, err := proto.Marshal(benchEvent(i))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x05, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast, slow Event
		errFast := fast.UnmarshalVT(b)
		errSlow := proto.Unmarshal(b, &slow)
		if errFast != nil || errSlow != nil {
			return
		}
		if a, b := fast.API(), slow.API(); !reflect.DeepEqual(a, b) {
			t.Fatalf("UnmarshalVT read %+v, proto.Unmarshal %+v", a, b)
		}
	})
}
