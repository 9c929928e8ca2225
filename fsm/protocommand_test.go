package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// protoRequests are requests with a protobuf form, every field of each set
// somewhere.
func protoRequests() []Request {
	full := plugin("csi", "ebs", "a1")
	full.Options = map[string]string{}
	for i := range 10 { // in Go's random order, encoded in key order
		full.Options[fmt.Sprintf("k%d", 9-i)] = fmt.Sprint(i)
	}
	full.ConnectionInfo = &api.ConnectionInfo{SocketPath: "/run/ebs.sock", Address: "10.0.0.1:9000"}
	return []Request{
		&RegisterRequest{Plugin: full, RequestID: "r1"},
		reg(&api.PluginInfo{Type: "t", Name: "n", AllocID: "a", ConnectionInfo: &api.ConnectionInfo{Address: "x"}}),
		reg(leased(plugin("csi", "ebs", "a2"), 90*time.Second)),
		reg(suspect(plugin("csi", "ebs", "a3"), "probe")),
		&DeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", RequestID: "r2"},
		dereg("csi", "ebs", "a1"),
		&ConditionalDeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfNodeID: "n2", IfModifyIndex: 7, RequestID: "r3"},
		&ConditionalDeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfNodeID: "n2"},
		&ConditionalDeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfModifyIndex: 1 << 40},
		&ConditionalRegisterRequest{Plugin: full, IfNodeID: "n2", RequestID: "r4"},
		&ConditionalRegisterRequest{Plugin: suspect(plugin("csi", "ebs", "a3"), "probe"), IfNodeID: "n1"},
		hostSync("n1", true, []*api.PluginInfo{full, leased(plugin("csi", "ebs", "a2"), 90*time.Second), suspect(plugin("csi", "ebs", "a3"), "probe")},
			api.HostDeregistration{Type: "csi", Name: "efs", AllocID: "a1", IfModifyIndex: 1 << 40}, api.HostDeregistration{Type: "csi", Name: "efs", AllocID: "a2"}),
		hostSync("n1", false, nil, api.HostDeregistration{Type: "csi", Name: "efs", AllocID: "a1"}),
	}
}

// The protobuf form of a command decodes to exactly the request its
// msgpack form decodes to, and re-encodes to its own bytes.
func TestProtoCommandsDecodeAsTheirMsgpackForm(t *testing.T) {
	for i, req := range protoRequests() {
		t.Run(fmt.Sprintf("%d-%s", i, req.CommandType()), func(t *testing.T) {
			pb, err := EncodeCommandIn(req, Protobuf)
			if err != nil {
				t.Fatal(err)
			}
			if encodingOf(CommandType(pb[0])) != Protobuf {
				t.Fatalf("type byte %d is not a protobuf command", pb[0])
			}
			mp, err := EncodeCommand(req)
			if err != nil {
				t.Fatal(err)
			}
			fromPB, err := DecodeCommand(pb)
			if err != nil {
				t.Fatal(err)
			}
			fromMP, err := DecodeCommand(mp)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fromPB, fromMP) {
				t.Fatalf("protobuf form decodes to %#v\nmsgpack form to %#v", fromPB, fromMP)
			}
			if again, err := ReencodeCommand(pb); err != nil || !bytes.Equal(again, pb) {
				t.Fatalf("re-encoding: %v\n%x\nwant %x", err, again, pb)
			}
		})
	}
}

// A log applied in either encoding leaves byte-identical states: a
// cluster whose entries switch encoding midway (the upgrade) holds the
// state it would have held without the switch.
func TestEitherEncodingAppliesToTheSameState(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var reqs []Request
	for i := 0; i < 400; i++ {
		ptype, name, alloc := fmt.Sprintf("t%d", rng.Intn(2)), fmt.Sprintf("n%d", rng.Intn(5)), fmt.Sprintf("a%d", rng.Intn(6))
		var req Request
		switch x := rng.Intn(10); {
		case x < 6:
			p := plugin(ptype, name, alloc)
			p.NodeID = fmt.Sprintf("node%d", rng.Intn(3))
			switch rng.Intn(4) {
			case 0:
				p.Options = map[string]string{"x": fmt.Sprint(rng.Intn(3))}
			case 1:
				p = leased(p, time.Duration(1+rng.Intn(3))*time.Minute)
			case 2:
				p = suspect(p, "probe")
			}
			req = reg(p)
		case x < 8:
			req = dereg(ptype, name, alloc)
		default:
			req = &ConditionalDeregisterRequest{Type: ptype, Name: name, AllocID: alloc, IfNodeID: fmt.Sprintf("node%d", rng.Intn(3))}
		}
		if r, ok := req.(*RegisterRequest); ok && rng.Intn(3) == 0 {
			req = &ConditionalRegisterRequest{Plugin: r.Plugin, IfNodeID: fmt.Sprintf("node%d", rng.Intn(3))}
		}
		if rng.Intn(3) == 0 {
			setRequestID(req, fmt.Sprintf("req-%d", rng.Intn(100)))
		}
		reqs = append(reqs, req)
	}
	apply := func(enc func(i int) Encoding) []byte {
		a := newApplier(t)
		for i, req := range reqs {
			b, err := EncodeCommandIn(req, enc(i))
			if err != nil {
				t.Fatal(err)
			}
			a.fsm.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: b})
		}
		return a.snapshot()
	}
	msgpack := apply(func(int) Encoding { return Msgpack })
	for name, enc := range map[string]func(int) Encoding{
		"protobuf":        func(int) Encoding { return Protobuf },
		"switched midway": func(i int) Encoding { return Encoding(i / 200) },
		"alternating":     func(i int) Encoding { return Encoding(i % 2) },
	} {
		if got := apply(enc); !bytes.Equal(got, msgpack) {
			t.Errorf("%s: state differs from the msgpack log's (%d bytes vs %d)", name, len(got), len(msgpack))
		}
	}
}

func TestProtoCommandDecoding(t *testing.T) {
	good, err := EncodeCommandIn(&RegisterRequest{Plugin: plugin("csi", "ebs", "a1"), RequestID: "r1"}, Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	// A field this binary does not know (number 9), a megabyte long.
	future := protowire.AppendTag(append([]byte{}, good...), 9, protowire.BytesType)
	future = protowire.AppendBytes(future, bytes.Repeat([]byte{0xc1}, 1<<20))
	wrongType := protowire.AppendTag([]byte{byte(RegisterProtoCommand)}, 2, protowire.VarintType)
	wrongType = protowire.AppendVarint(wrongType, 1)
	noPlugin := protowire.AppendTag([]byte{byte(RegisterProtoCommand)}, 2, protowire.BytesType)
	noPlugin = protowire.AppendString(noPlugin, "r1")
	badPlugin := protowire.AppendTag([]byte{byte(RegisterProtoCommand)}, 1, protowire.BytesType)
	badPlugin = protowire.AppendBytes(badPlugin, []byte{0x0a, 0x7f}) // type: 127 bytes promised, none there
	invalid, _ := EncodeCommandIn(&DeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1"}, Protobuf)
	invalid = protowire.AppendTag(invalid, 1, protowire.BytesType) // a second type, which wins: a bad one
	invalid = protowire.AppendString(invalid, "bad type\x00")
	cases := []struct {
		name string
		in   []byte
		want []byte // nil: refused
	}{
		{"as encoded", good, good},
		{"an unknown field", future, good},
		{"truncated", good[:len(good)-3], nil},
		{"a known field of another wire type", wrongType, nil},
		{"no plugin", noPlugin, nil},
		{"a plugin that does not parse", badPlugin, nil},
		{"a repeated field's last value invalid", invalid, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReencodeCommand(tc.in)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("accepted: %x", got)
				}
				if !errorsIs(err, api.ErrMalformed) && !errorsIs(err, api.ErrInvalid) {
					t.Fatalf("error %v is neither malformed nor invalid", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("%x, %v; want %x", got, err, tc.want)
			}
		})
	}
}

// The options are written by hand, under the field number the generated
// code uses for them.
func TestPluginOptionsFieldIsTheGeneratedOne(t *testing.T) {
	f := (&pluginpb.PluginInfo{}).ProtoReflect().Descriptor().Fields().ByName("options")
	if f == nil || f.Number() != pluginOptionsField || !f.IsMap() {
		t.Fatalf("pluginpb.PluginInfo's options field is %v, want map field %d", f, pluginOptionsField)
	}
}

// Commands without a protobuf form keep their msgpack encoding when asked
// for protobuf.
func TestEncodeCommandInFallsBackToMsgpack(t *testing.T) {
	req := &DeregisterNodeRequest{NodeID: "n1"}
	b, err := EncodeCommandIn(req, Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := EncodeCommand(req); !bytes.Equal(b, want) {
		t.Fatalf("%x, want the msgpack form %x", b, want)
	}
}
