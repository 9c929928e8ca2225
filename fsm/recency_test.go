package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// modelInstance is one instance of the reference model of a recency
// list: a plain slice, newest first, changed as the FSM documents it (a
// registration with new content goes to the front, a change of health
// keeps its place, a removal closes the gap).
type modelInstance struct {
	alloc, node, version string
	health               string // "", "probe" (its registration's) or "node" (a node mark)
}

func (m modelInstance) plugin() *api.PluginInfo {
	p := plugin("csi", "x", m.alloc)
	p.NodeID, p.Version = m.node, m.version
	if m.health == "probe" {
		suspect(p, "probe")
	}
	return p
}

func (m modelInstance) String() string { return m.alloc + "/" + m.version + "/" + m.health }

type recencyModel []modelInstance

// versions makes every registration's content new: one that changed
// only health would keep its place.
var versions int

func (m recencyModel) find(alloc string) int {
	return slices.IndexFunc(m, func(i modelInstance) bool { return i.alloc == alloc })
}

func (m recencyModel) String() string {
	var b strings.Builder
	for _, i := range m {
		b.WriteString(i.String() + " ")
	}
	return b.String()
}

func stateString(list []*api.PluginInfo) string {
	var b strings.Builder
	for _, p := range list {
		h := ""
		switch {
		case p.Health == nil:
		case p.Health.Check == api.CheckNode:
			h = "node"
		default:
			h = "probe"
		}
		b.WriteString(p.AllocID + "/" + p.Version + "/" + h + " ")
	}
	return b.String()
}

// step changes the model by one random write and returns the write.
func (m *recencyModel) step(rng *rand.Rand, allocs, ops int) Request {
	alloc := fmt.Sprintf("a%03d", rng.IntN(allocs))
	node := fmt.Sprintf("node-%d", rng.IntN(7))
	pos := m.find(alloc)
	switch op := rng.IntN(ops); {
	case op < 4 || pos < 0: // (re-)register with new content: to the front
		in := modelInstance{alloc: alloc, node: node, version: fmt.Sprintf("1.%d.0", versions)}
		versions++
		if pos >= 0 {
			*m = slices.Delete(*m, pos, pos+1)
		}
		*m = slices.Insert(*m, 0, in)
		return reg(in.plugin())
	case op < 6: // the instance's own checker changes its health: in place
		in := (*m)[pos]
		in.health = map[bool]string{true: "", false: "probe"}[in.health != ""]
		(*m)[pos] = in
		return reg(in.plugin())
	case op < 8:
		*m = slices.Delete(*m, pos, pos+1)
		return dereg("csi", "x", alloc)
	case op < 9:
		*m = slices.DeleteFunc(*m, func(i modelInstance) bool { return i.node == node })
		return &DeregisterNodeRequest{NodeID: node}
	default: // a node mark, or its clearing: in place
		mark := rng.IntN(2) == 0
		for j, i := range *m {
			if i.node != node {
				continue
			}
			if mark && i.health == "" {
				(*m)[j].health = "node"
			} else if !mark && i.health == "node" {
				(*m)[j].health = ""
			}
		}
		if mark {
			return nodeSuspect(node)
		}
		return &NodeHealthRequest{NodeID: node}
	}
}

// TestRecencyOrderMatchesTheModel applies random writes to one name and
// checks after each write (or batch) that its recency list, newest, each
// instance and the events' Current are the model's, with lists long
// enough to split the B+trees' nodes (32 entries), through snapshots and
// restores (which renumber the list) and ApplyBatch.
func TestRecencyOrderMatchesTheModel(t *testing.T) {
	for _, tc := range []struct {
		name          string
		allocs, steps int
		batch         bool
	}{
		{"short list", 10, 2000, false},
		{"long list", 300, 6000, false},
		{"long list, batches", 300, 6000, true},
		{"long list, few removals", 500, 6000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.allocs), uint64(tc.steps)))
			a := newApplier(t)
			var m recencyModel
			ops := 10
			if tc.name == "long list, few removals" {
				ops = 7 // register, health and single deregisters only
			}
			var pending []*raft.Log
			check := func(step int) {
				t.Helper()
				st := a.fsm.State()
				if got, want := stateString(st.Instances("csi", "x")), m.String(); got != want {
					t.Fatalf("step %d: list\n got %s\nwant %s", step, got, want)
				}
				if st.Len() != len(m) {
					t.Fatalf("step %d: Len %d, want %d", step, st.Len(), len(m))
				}
				if len(m) == 0 {
					if st.Newest("csi", "x") != nil || st.List("csi") != nil {
						t.Fatalf("step %d: an empty name is still listed", step)
					}
					return
				}
				if got := st.Newest("csi", "x"); got.AllocID != m[0].alloc {
					t.Fatalf("step %d: newest %s, want %s", step, got.AllocID, m[0].alloc)
				}
				if got := st.List("csi"); len(got) != 1 || got[0].AllocID != m[0].alloc {
					t.Fatalf("step %d: List %v, want %s", step, got, m[0].alloc)
				}
				i := m[rng.IntN(len(m))]
				if got := st.Instance("csi", "x", i.alloc); got == nil || got.Version != i.version {
					t.Fatalf("step %d: instance %s is %v", step, i.alloc, got)
				}
				if n := len(a.rec.events); !tc.batch && n > 0 && a.rec.events[n-1].Current.AllocID != m[0].alloc {
					t.Fatalf("step %d: last event's Current %s, want %s", step, a.rec.events[n-1].Current.AllocID, m[0].alloc)
				}
			}
			for step := range tc.steps {
				if step%500 == 499 {
					a.fsm.ApplyBatch(pending)
					pending = nil
					check(step)
					restoreInto(t, a)
					check(step)
				}
				l := a.entry(m.step(rng, tc.allocs, ops))
				if !tc.batch {
					a.fsm.Apply(l)
					check(step)
					continue
				}
				if pending = append(pending, l); rng.IntN(20) == 0 {
					a.fsm.ApplyBatch(pending)
					pending = nil
					check(step)
				}
			}
		})
	}
}

// restoreInto replaces a's FSM with one restored from a's snapshot.
func restoreInto(t *testing.T, a *applier) {
	t.Helper()
	snap := a.snapshot()
	a.fsm = New(a.rec)
	if err := a.fsm.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if again := a.snapshot(); !bytes.Equal(again, snap) {
		t.Fatal("a restored state snapshots to other bytes")
	}
}

// TestWriteAllocationDoesNotGrowWithTheFleet: what the FSM allocates for a
// write to names with one instance per host (a new registration, one
// deregistration, a node's health mark, a node's deregistration) is about
// the same at 4,000 hosts as at 100. A recency list copied whole on every
// write allocated 8 bytes per host per write, and the node's mark 20
// times that.
func TestWriteAllocationDoesNotGrowWithTheFleet(t *testing.T) {
	const writes = 100
	for _, op := range fleetOps {
		t.Run(op.name, func(t *testing.T) {
			perWrite := func(hosts int) uint64 {
				f := New(nil)
				if err := f.Restore(io.NopCloser(bytes.NewReader(fleetSnapshot(t, hosts)))); err != nil {
					t.Fatal(err)
				}
				logs := make([]*raft.Log, writes)
				for i := range logs {
					data, err := EncodeCommand(op.req(i, hosts))
					if err != nil {
						t.Fatal(err)
					}
					logs[i] = &raft.Log{Index: f.State().Index() + uint64(i) + 1, Type: raft.LogCommand, Data: data}
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for _, l := range logs {
					if res := f.Apply(l).(*ApplyResult); res.Err != nil || res.Result == api.ResultUnchanged || res.Result == api.ResultAbsent {
						t.Fatalf("%s: %v %v", op.name, res.Result, res.Err)
					}
				}
				runtime.ReadMemStats(&after)
				return (after.TotalAlloc - before.TotalAlloc) / writes
			}
			small, large := perWrite(100), perWrite(4000)
			t.Logf("%s: %d B per write at 100 hosts, %d B at 4,000", op.name, small, large)
			if large > 2*small+8<<10 {
				t.Errorf("%s allocates %d B per write at 4,000 hosts, %d B at 100: it grows with the fleet", op.name, large, small)
			}
		})
	}
}
