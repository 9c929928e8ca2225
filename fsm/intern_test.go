package fsm

import (
	"bytes"
	"maps"
	"testing"
)

// Instances with equal options share one map; different options never
// do, whatever bytes the options hold (NUL included).
func TestInternedOptions(t *testing.T) {
	cases := []struct {
		name string
		a, b map[string]string
		same bool
	}{
		{"equal", map[string]string{"zone": "a", "rack": "1"}, map[string]string{"rack": "1", "zone": "a"}, true},
		{"other value", map[string]string{"zone": "a"}, map[string]string{"zone": "b"}, false},
		{"nul moves between key and value", map[string]string{"a\x00b": "c"}, map[string]string{"a": "b\x00c"}, false},
		{"split across entries", map[string]string{"ab": "", "c": ""}, map[string]string{"a": "bc"}, false},
		{"empty value", map[string]string{"k": ""}, map[string]string{"k": "\x00"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			p, q := plugin("csi", "n", "a1"), plugin("csi", "n", "a2")
			p.Options, q.Options = maps.Clone(tc.a), maps.Clone(tc.b)
			a.apply(reg(p))
			a.apply(reg(q))
			st := a.fsm.State()
			gp, gq := st.Instance("csi", "n", "a1"), st.Instance("csi", "n", "a2")
			if !maps.Equal(gp.Options, tc.a) || !maps.Equal(gq.Options, tc.b) {
				t.Fatalf("stored %q and %q, registered %q and %q", gp.Options, gq.Options, tc.a, tc.b)
			}
			shared := sameMap(gp.Options, gq.Options)
			if shared != tc.same {
				t.Fatalf("shared %v, want %v", shared, tc.same)
			}
		})
	}
}

// sameMap reports whether a and b are one map (a write through one shows
// in the other), probed with a key no test here registers.
func sameMap(a, b map[string]string) bool {
	if a == nil || b == nil {
		return false
	}
	const probe = "\xffprobe"
	a[probe] = "x"
	_, ok := b[probe]
	delete(a, probe)
	return ok
}

// Restoring a snapshot shares options too, and leaves the snapshot's
// bytes as they were.
func TestInternedOptionsAfterRestore(t *testing.T) {
	a := newApplier(t)
	for _, alloc := range []string{"a1", "a2", "a3"} {
		p := plugin("csi", "n", alloc)
		p.Options = map[string]string{"zone": "eu"}
		a.apply(reg(p))
	}
	snap := a.snapshot()
	st, err := ReadState(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	if !sameMap(st.Instance("csi", "n", "a1").Options, st.Instance("csi", "n", "a3").Options) {
		t.Fatal("restored instances with equal options do not share them")
	}
	var again bytes.Buffer
	if err := WriteState(&again, st); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), snap) {
		t.Fatal("the restored state encodes to other bytes")
	}
}
