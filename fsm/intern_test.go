package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"runtime"
	"testing"
	"unsafe"

	"github.com/plugreg/plugreg/api"
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

// Equal strings of instances decoded from different entries share one
// copy, across garbage collections (the unique package's table forgot a
// string at the next GC once no handle to it lived, and only the string
// was kept), and interning changes no value, also once the table emptied.
func TestInternedStrings(t *testing.T) {
	a := newApplier(t)
	register := func(alloc, version string) *api.PluginInfo {
		p := plugin("csi", "ebs", alloc)
		p.Version, p.NodeID = version, "host-7"
		a.apply(reg(p))
		return a.fsm.State().Instance("csi", "ebs", alloc)
	}
	first := register("a1", "1.4.0")
	runtime.GC()
	runtime.GC()
	again := register("a2", "1.4.0")
	for _, f := range []struct{ name, x, y string }{
		{"Type", first.Type, again.Type}, {"Name", first.Name, again.Name},
		{"Version", first.Version, again.Version}, {"NodeID", first.NodeID, again.NodeID},
	} {
		if f.x != f.y || unsafe.StringData(f.x) != unsafe.StringData(f.y) {
			t.Errorf("%s: %q and %q are two copies", f.name, f.x, f.y)
		}
	}
	for i := 0; i < maxStrings+10; i++ { // empties the table at least once
		a.apply(reg(plugin("csi", fmt.Sprintf("n%d", i), "x")))
	}
	last := register("a3", "1.4.0")
	if last.Version != "1.4.0" || last.NodeID != "host-7" || last.Name != "ebs" || last.Type != "csi" {
		t.Fatalf("interning changed a value: %+v", last)
	}
}
