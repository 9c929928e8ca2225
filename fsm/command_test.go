package fsm

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func TestCommandRoundTrip(t *testing.T) {
	p := plugin("csi", "ebs", "a1")
	p.Options = map[string]string{"b": "2", "a": "1"}
	for _, req := range []Request{
		&RegisterRequest{Plugin: p, RequestID: "r1"},
		&DeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", RequestID: "r2"},
		&DeregisterNodeRequest{NodeID: "n1"},
		&ConditionalDeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfNodeID: "n2", IfModifyIndex: 7, RequestID: "r3"},
		&ConditionalRegisterRequest{Plugin: leased(plugin("csi", "ebs", "a3"), time.Minute), IfNodeID: "n1", RequestID: "r4"},
		&RegisterRequest{Plugin: leased(plugin("csi", "ebs", "a2"), time.Minute)},
		expiry(lease("csi", "ebs", "a1", 3), lease("csi", "efs", "a2", 9)),
		hostSync("n1", true, []*api.PluginInfo{p, leased(plugin("csi", "ebs", "a3"), time.Minute)}, api.HostDeregistration{Type: "csi", Name: "efs", AllocID: "a2", IfModifyIndex: 9}),
		&NodeHealthBatchRequest{Nodes: []NodeHealthRequest{{NodeID: "n1", Suspect: true, Reason: "failed", LastSeen: time.Unix(1700000000, 5).UTC()}, {NodeID: "n2"}}},
		&StateCheckRequest{Node: "n1", Index: 7, Digest: bytes.Repeat([]byte{9}, 32)},
	} {
		t.Run(req.CommandType().String(), func(t *testing.T) {
			b, err := EncodeCommand(req)
			if err != nil {
				t.Fatal(err)
			}
			if CommandType(b[0]) != req.CommandType() {
				t.Fatalf("type byte %d", b[0])
			}
			got, err := DecodeCommand(b)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := EncodeCommand(got)
			if !bytes.Equal(b, again) {
				t.Fatalf("re-encoding differs:\n%x\n%x", b, again)
			}
			if got.ID() != req.ID() {
				t.Fatalf("request id %q, want %q", got.ID(), req.ID())
			}
		})
	}
}

// A newer binary may add fields to a command; this one must ignore them.
func TestDecodeIgnoresUnknownFields(t *testing.T) {
	type futureDeregister struct {
		Type, Name, AllocID string
		Reason              string // a field this binary does not know
	}
	var buf bytes.Buffer
	buf.WriteByte(byte(DeregisterCommand))
	if err := codec.NewEncoder(&buf, msgpackHandle).Encode(&futureDeregister{"csi", "ebs", "a1", "drain"}); err != nil {
		t.Fatal(err)
	}
	req, err := DecodeCommand(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if d := req.(*DeregisterRequest); d.Type != "csi" || d.Name != "ebs" || d.AllocID != "a1" {
		t.Fatalf("decoded %+v", d)
	}
}

func TestDecodeErrors(t *testing.T) {
	valid, _ := EncodeCommand(dereg("csi", "ebs", "a1"))
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, api.ErrMalformed},
		{"unknown type", []byte{42, 0x80}, api.ErrUnknownCommand},
		{"unknown ignorable type", []byte{byte(IgnoreUnknownTypeFlag | 9), 0x80}, api.ErrUnknownCommand},
		{"truncated body", valid[:len(valid)-3], api.ErrMalformed},
		{"body not a map", []byte{byte(RegisterCommand), 0x01}, api.ErrMalformed},
		{"type byte only", []byte{byte(DeregisterCommand)}, api.ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeCommand(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
}

// A command that decodes but is invalid (a bypass of the edge) is rejected
// by Apply with an error result on every node alike; the state is unchanged
// but the index advances.
func TestApplyRejectsInvalidCommand(t *testing.T) {
	a := newApplier(t)
	a.apply(reg(plugin("csi", "ebs", "a1")))
	before := a.snapshot()
	var buf bytes.Buffer
	buf.WriteByte(byte(RegisterCommand))
	codec.NewEncoder(&buf, msgpackHandle).Encode(&RegisterRequest{Plugin: plugin("csi", "", "a2")})
	res := a.fsm.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: buf.Bytes()}).(*ApplyResult)
	if !errors.Is(res.Err, api.ErrInvalid) {
		t.Fatalf("error %v, want ErrInvalid", res.Err)
	}
	if a.fsm.State().Index() != 2 {
		t.Fatalf("index %d, want 2", a.fsm.State().Index())
	}
	a.index = 2
	after := a.snapshot()
	// Only the header's index may differ.
	if len(before) != len(after) || len(a.rec.events) != 1 {
		t.Fatalf("state changed by a rejected command")
	}
}

func TestApplyUnknownCommand(t *testing.T) {
	t.Run("ignorable is skipped", func(t *testing.T) {
		a := newApplier(t)
		res := a.fsm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte{byte(IgnoreUnknownTypeFlag | 42), 0x80}}).(*ApplyResult)
		if res.Result != ResultIgnored || res.Err != nil {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("not ignorable panics", func(t *testing.T) {
		a := newApplier(t)
		defer func() {
			if recover() == nil {
				t.Fatal("Apply of an unknown command did not panic")
			}
		}()
		a.fsm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte{42, 0x80}})
	})
}

// Configuration entries reach a BatchingFSM too: they answer nil and
// advance the FSM's own applied index.
func TestApplyBatchSkipsConfiguration(t *testing.T) {
	a := newApplier(t)
	l1 := a.entry(reg(plugin("csi", "ebs", "a1")))
	cfg := &raft.Log{Index: 2, Type: raft.LogConfiguration}
	a.index = 2
	l3 := a.entry(reg(plugin("csi", "ebs", "a2")))
	out := a.fsm.ApplyBatch([]*raft.Log{l1, cfg, l3})
	if out[1] != nil || out[0].(*ApplyResult).Index != 1 || out[2].(*ApplyResult).Index != 3 {
		t.Fatalf("responses %v", out)
	}
	if got := a.fsm.State().Index(); got != 3 {
		t.Fatalf("index %d, want 3", got)
	}
}

// A peer's command is proposed as this binary encodes it: bytes after the
// command, and fields this binary does not know, do not reach the log;
// what does not decode is refused.
func TestReencodeCommand(t *testing.T) {
	good, err := EncodeCommand(reg(plugin("csi", "ebs", "a1")))
	if err != nil {
		t.Fatal(err)
	}
	junk := append(append([]byte{}, good...), bytes.Repeat([]byte{0xc1}, 1<<20)...)
	cases := []struct {
		name string
		in   []byte
		want []byte // nil: refused
	}{
		{"as encoded", good, good},
		{"a megabyte after it", junk, good},
		{"truncated", good[:len(good)/2], nil},
		{"unknown type", []byte{0x77, 0x80}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReencodeCommand(tc.in)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("accepted: %d bytes", len(got))
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("%d bytes, %v; want the command's own %d bytes", len(got), err, len(tc.want))
			}
		})
	}
}
