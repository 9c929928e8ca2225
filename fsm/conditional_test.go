package fsm

import (
	"errors"
	"testing"

	"github.com/plugreg/plugreg/api"
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
