package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"google.golang.org/protobuf/encoding/protowire"
)

// A conditional deregister removes the instance only while it still
// belongs to the named node and/or was last changed at the named index;
// otherwise it is refused with ErrConflict and nothing changes (no event,
// no state change, on every node alike).
func TestConditionalDeregister(t *testing.T) {
	cond := func(node string, index uint64) *ConditionalDeregisterRequest {
		return &ConditionalDeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfNodeID: node, IfModifyIndex: index}
	}
	cases := []struct {
		name    string
		req     *ConditionalDeregisterRequest
		want    api.Result
		wantErr error
	}{
		{"node matches", cond("n1", 0), api.ResultDeregistered, nil},
		{"index matches", cond("", 2), api.ResultDeregistered, nil},
		{"node and index match", cond("n1", 2), api.ResultDeregistered, nil},
		{"another node owns it", cond("n2", 0), "", api.ErrConflict},
		{"changed since", cond("", 1), "", api.ErrConflict},
		{"node matches, index does not", cond("n1", 1), "", api.ErrConflict},
		{"absent instance", &ConditionalDeregisterRequest{Type: "csi", Name: "ebs", AllocID: "zz", IfNodeID: "n2"}, api.ResultAbsent, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			a.apply(reg(plugin("csi", "ebs", "a1")))                   // index 1
			a.apply(reg(withVersion(plugin("csi", "ebs", "a1"), "2"))) // index 2: ModifyIndex 2
			nEvents := len(a.rec.events)
			res := a.fsm.Apply(a.entry(tc.req)).(*ApplyResult)
			if tc.wantErr != nil {
				if !errors.Is(res.Err, tc.wantErr) {
					t.Fatalf("err %v, want %v", res.Err, tc.wantErr)
				}
				if len(a.rec.events) != nEvents {
					t.Fatalf("a refused deregister emitted events: %v", renderEvents(a.rec.events[nEvents:]))
				}
				st := a.fsm.State()
				if st.Instance("csi", "ebs", "a1") == nil {
					t.Fatal("a refused deregister removed the instance")
				}
				// Only the index advanced.
				if st.Index() != 3 || st.Len() != 1 {
					t.Fatalf("state index %d len %d", st.Index(), st.Len())
				}
				return
			}
			if res.Err != nil || res.Result != tc.want {
				t.Fatalf("got %q err %v, want %q", res.Result, res.Err, tc.want)
			}
		})
	}
}

func TestConditionalDeregisterNeedsACondition(t *testing.T) {
	_, err := EncodeCommand(&ConditionalDeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1"})
	if !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("err %v, want ErrInvalid", err)
	}
}

// A conditional register (what a node-bound caller writes) applies only
// while no instance has its key or the existing one belongs to IfNodeID;
// otherwise it is refused with ErrConflict and nothing changes, whatever
// it would have changed: the endpoint, the lease, the health mark.
func TestConditionalRegister(t *testing.T) {
	mine := func(f func(p *api.PluginInfo)) *api.PluginInfo {
		p := onNode(plugin("csi", "ebs", "a1"), "n2")
		p.ConnectionInfo = &api.ConnectionInfo{Address: "attacker:9000"}
		if f != nil {
			f(p)
		}
		return p
	}
	cond := func(p *api.PluginInfo, ifNode string) *ConditionalRegisterRequest {
		return &ConditionalRegisterRequest{Plugin: p, IfNodeID: ifNode}
	}
	cases := []struct {
		name    string
		owner   string // the node of the instance registered first; "" for none
		req     *ConditionalRegisterRequest
		want    api.Result
		wantErr error
	}{
		{"absent: registers", "", cond(mine(nil), "n2"), api.ResultRegistered, nil},
		{"own instance: updates", "n2", cond(mine(nil), "n2"), api.ResultUpdated, nil},
		{"own instance, unchanged", "n2", cond(onNode(plugin("csi", "ebs", "a1"), "n2"), "n2"), api.ResultUnchanged, nil},
		{"another node's: takes no endpoint", "n1", cond(mine(nil), "n2"), "", api.ErrConflict},
		{"another node's: moves no lease", "n1", cond(mine(func(p *api.PluginInfo) { p.TTL = api.Duration(time.Minute) }), "n2"), "", api.ErrConflict},
		{"another node's: marks no health", "n1", cond(onNode(suspect(plugin("csi", "ebs", "a1"), "probe"), "n2"), "n2"), "", api.ErrConflict},
		{"another node's, even left on its node", "n1", cond(plugin("csi", "ebs", "a1"), "n2"), "", api.ErrConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			if tc.owner != "" {
				a.apply(reg(onNode(plugin("csi", "ebs", "a1"), tc.owner)))
			} else {
				a.apply(reg(plugin("csi", "other", "o1")))
			}
			before := a.fsm.State().Instance("csi", "ebs", "a1")
			nEvents := len(a.rec.events)
			res := a.fsm.Apply(a.entry(tc.req)).(*ApplyResult)
			if tc.wantErr == nil {
				if res.Err != nil || res.Result != tc.want {
					t.Fatalf("got %q err %v, want %q", res.Result, res.Err, tc.want)
				}
				if got := a.fsm.State().Instance("csi", "ebs", "a1"); got.NodeID != tc.req.IfNodeID {
					t.Fatalf("instance on node %q after the write", got.NodeID)
				}
				return
			}
			if !errors.Is(res.Err, tc.wantErr) {
				t.Fatalf("err %v, want %v", res.Err, tc.wantErr)
			}
			if len(a.rec.events) != nEvents {
				t.Fatalf("a refused register emitted events: %v", renderEvents(a.rec.events[nEvents:]))
			}
			st := a.fsm.State()
			if got := st.Instance("csi", "ebs", "a1"); got != before {
				t.Fatalf("a refused register changed the instance: %+v, was %+v", got, before)
			}
			if st.Index() != 2 || st.Len() != 1 {
				t.Fatalf("state index %d len %d", st.Index(), st.Len())
			}
		})
	}
}

// A conditional register's request ID answers a retry of an applied
// write with its first result; a refused one records nothing (as a
// refused conditional deregister), so a retry is checked again.
func TestConditionalRegisterRequestIDs(t *testing.T) {
	a := newApplier(t)
	a.apply(reg(onNode(plugin("csi", "ebs", "a1"), "n1")))
	take := &ConditionalRegisterRequest{Plugin: onNode(plugin("csi", "ebs", "a1"), "n2"), IfNodeID: "n2", RequestID: "r1"}
	if res := a.fsm.Apply(a.entry(take)).(*ApplyResult); !errors.Is(res.Err, api.ErrConflict) || res.Duplicate {
		t.Fatalf("take-over: %+v", res)
	}
	a.apply(dereg("csi", "ebs", "a1"))
	first := a.apply(&ConditionalRegisterRequest{Plugin: onNode(plugin("csi", "ebs", "a1"), "n2"), IfNodeID: "n2", RequestID: "r1"})
	if first.Result != api.ResultRegistered || first.Duplicate {
		t.Fatalf("the retry once the instance is gone: %+v", first)
	}
	again := a.apply(&ConditionalRegisterRequest{Plugin: withVersion(onNode(plugin("csi", "ebs", "a1"), "n2"), "9"), IfNodeID: "n2", RequestID: "r1"})
	if !again.Duplicate || again.Index != first.Index || again.Result != api.ResultRegistered {
		t.Fatalf("a retry of the applied write: %+v, first %+v", again, first)
	}
	if got := a.fsm.State().Instance("csi", "ebs", "a1"); got.Version != "1.0.0" {
		t.Fatalf("a duplicate applied again: version %q", got.Version)
	}
}

// A conditional register without a condition is refused at the edge and
// in the log alike; its entry is protobuf whichever encoding is asked for,
// re-encodes to itself (a follower's proposal), and decodes to what was
// encoded.
func TestConditionalRegisterEncoding(t *testing.T) {
	if _, err := EncodeCommand(&ConditionalRegisterRequest{Plugin: plugin("csi", "ebs", "a1")}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("no condition: err %v, want ErrInvalid", err)
	}
	req := &ConditionalRegisterRequest{Plugin: leased(onNode(plugin("csi", "ebs", "a1"), "n2"), time.Minute), IfNodeID: "n2", RequestID: "r1"}
	for _, enc := range []Encoding{Msgpack, Protobuf} {
		b, err := EncodeCommandIn(req, enc)
		if err != nil {
			t.Fatal(err)
		}
		if CommandType(b[0]) != ConditionalRegisterCommand {
			t.Fatalf("type byte %d", b[0])
		}
		again, err := ReencodeCommand(b)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding: %v\n%x\nwant %x", err, again, b)
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, req) {
			t.Fatalf("decoded %#v\nwant %#v", got, req)
		}
	}
	// The entry without its condition (field 3) is invalid, on every node
	// alike; a plain registration's entry carrying a field 3 (unknown to
	// it) still applies unconditionally, as it did before the field had a
	// meaning elsewhere.
	plain, _ := EncodeCommandIn(reg(plugin("csi", "ebs", "a1")), Protobuf)
	noCondition := append([]byte{byte(ConditionalRegisterCommand)}, plain[1:]...)
	if _, err := DecodeCommand(noCondition); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("no condition in the entry: err %v, want ErrInvalid", err)
	}
	withField3 := protowire.AppendTag(append([]byte{}, plain...), 3, protowire.VarintType)
	withField3 = protowire.AppendVarint(withField3, 7)
	if r, err := DecodeCommand(withField3); err != nil {
		t.Fatalf("a registration with an unknown field 3: %v", err)
	} else if _, ok := r.(*RegisterRequest); !ok {
		t.Fatalf("decoded as %T", r)
	}
}
