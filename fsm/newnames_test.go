package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// "." and ".." are refused as a new registration's type, name, alloc or
// node, in either encoding: the HTTP API could reach such an instance only
// URL-encoded. Other names with dots are names.
func TestDotNamesRefusedWhenProposed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(p *api.PluginInfo)
		ok     bool
	}{
		{"type .", func(p *api.PluginInfo) { p.Type = "." }, false},
		{"name ..", func(p *api.PluginInfo) { p.Name = ".." }, false},
		{"alloc .", func(p *api.PluginInfo) { p.AllocID = "." }, false},
		{"node ..", func(p *api.PluginInfo) { p.NodeID = ".." }, false},
		{"name ...", func(p *api.PluginInfo) { p.Name = "..." }, true},
		{"name .hidden", func(p *api.PluginInfo) { p.Name = ".hidden" }, true},
		{"type csi.v1", func(p *api.PluginInfo) { p.Type = "csi.v1" }, true},
	} {
		for _, enc := range []Encoding{Msgpack, Protobuf} {
			// A plain registration, and a node-bound caller's conditional one.
			for _, ifNode := range []string{"", "n1"} {
				p := plugin("csi", "ebs", "a1")
				tc.modify(p)
				_, err := EncodeCommandIn(NewRegisterRequest(p, "", ifNode), enc)
				if tc.ok != (err == nil) || err != nil && !errors.Is(err, api.ErrInvalid) {
					t.Errorf("%s (encoding %d, if node %q): %v; want accepted=%v", tc.name, enc, ifNode, err, tc.ok)
				}
			}
		}
	}
}

// An entry of an older release that registered "." still decodes and
// applies as it did, in either encoding, and the instance can still be
// deregistered: only new proposals are refused.
func TestDotNamesInOldEntriesApply(t *testing.T) {
	for _, enc := range []Encoding{Msgpack, Protobuf} {
		a := newApplier(t)
		p := plugin(".", "..", ".")
		p.NodeID = ".."
		a.index++
		res := a.fsm.Apply(&raft.Log{Index: a.index, Term: 1, Type: raft.LogCommand, Data: olderReleaseEntry(t, reg(p), enc)}).(*ApplyResult)
		if res.Err != nil || res.Result != api.ResultRegistered || a.fsm.State().Instance(".", "..", ".") == nil {
			t.Fatalf("encoding %d: an older release's registration of \".\": %+v", enc, res)
		}
		if res := a.apply(dereg(".", "..", ".")); res.Result != api.ResultDeregistered {
			t.Fatalf("encoding %d: deregistering it: %+v", enc, res)
		}
	}
}

// olderReleaseEntry encodes r as a release without the new-name check
// did: Validate only.
func olderReleaseEntry(t *testing.T, r *RegisterRequest, enc Encoding) []byte {
	t.Helper()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if enc == Protobuf {
		return encodeRegisterProto(r)
	}
	var buf bytes.Buffer
	buf.WriteByte(byte(RegisterCommand))
	if err := codec.NewEncoder(&buf, msgpackHandle).Encode(r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
