package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/plugreg/plugreg/api"
)

// The hook sees the state as of the state check's own index, even in the
// middle of a batch, and the digests of two FSMs that batched the same
// entries differently agree; a state that differs in one instance has
// another digest.
func TestStateCheckSeesTheStateAtItsIndex(t *testing.T) {
	a := newApplier(t)
	logs := a.entryList(reg(plugin("csi", "ebs", "a1")), &StateCheckRequest{Node: "n1"}, reg(plugin("csi", "ebs", "a2")))
	type seen struct {
		index, instances uint64
		digest           [32]byte
	}
	hook := func(got *[]seen) func(*State, *StateCheckRequest) {
		return func(s *State, check *StateCheckRequest) {
			if check == nil || check.Node != "n1" {
				t.Fatalf("check %+v", check)
			}
			d, err := Digest(s)
			if err != nil {
				t.Fatal(err)
			}
			*got = append(*got, seen{s.Index(), uint64(s.Len()), d})
		}
	}
	var batched, single []seen
	a.fsm.OnStateCheck(hook(&batched))
	a.fsm.ApplyBatch(logs)
	b := newApplier(t)
	b.fsm.OnStateCheck(hook(&single))
	b.applyAll(logs)
	if len(batched) != 1 || batched[0].index != 2 || batched[0].instances != 1 {
		t.Fatalf("the hook saw %+v, want the state at index 2 with 1 instance", batched)
	}
	if len(single) != 1 || single[0] != batched[0] {
		t.Fatalf("batched %+v, one at a time %+v", batched, single)
	}
	if st := a.fsm.State(); st.Index() != 3 || st.Len() != 2 {
		t.Fatalf("after the batch: index %d, %d instances", st.Index(), st.Len())
	}

	c := newApplier(t)
	other := plugin("csi", "ebs", "a1")
	other.NodeID = "n9"
	var changed []seen
	c.fsm.OnStateCheck(hook(&changed))
	c.applyAll(c.entryList(reg(other), &StateCheckRequest{Node: "n1"}))
	if len(changed) != 1 || changed[0].digest == batched[0].digest {
		t.Fatalf("a state with another node for a1 digests alike: %+v", changed)
	}
}

func TestStateCheckValidate(t *testing.T) {
	d := bytes.Repeat([]byte{1}, 32)
	for _, tc := range []struct {
		name string
		req  StateCheckRequest
		ok   bool
	}{
		{"first", StateCheckRequest{Node: "n1"}, true},
		{"with a digest", StateCheckRequest{Node: "n1", Index: 9, Digest: d}, true},
		{"no node", StateCheckRequest{Index: 9, Digest: d}, false},
		{"digest without index", StateCheckRequest{Node: "n1", Digest: d}, false},
		{"index without digest", StateCheckRequest{Node: "n1", Index: 9}, false},
		{"short digest", StateCheckRequest{Node: "n1", Index: 9, Digest: d[:31]}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate: %v", err)
			}
			if err != nil && tc.req.Node != "" && !errors.Is(err, api.ErrMalformed) {
				t.Fatalf("not ErrMalformed: %v", err)
			}
		})
	}
}
