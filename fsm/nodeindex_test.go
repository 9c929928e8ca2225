package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// bruteNode lists a node's instances by walking the whole state: what the
// node index must always agree with.
func bruteNode(s *State, nodeID string) []string {
	var out []string
	s.Walk(func(_, _ string, list []*api.PluginInfo) bool {
		for _, p := range list {
			if p.NodeID == nodeID {
				out = append(out, fmt.Sprintf("%s/%s/%s@%d", p.Type, p.Name, p.AllocID, p.ModifyIndex))
			}
		}
		return true
	})
	slices.Sort(out)
	return out
}

func indexed(s *State, nodeID string) []string {
	var out []string
	for _, p := range s.NodeInstances(nodeID) {
		out = append(out, fmt.Sprintf("%s/%s/%s@%d", p.Type, p.Name, p.AllocID, p.ModifyIndex))
	}
	return out
}

// The node index agrees with a walk of the state after every kind of
// change (register, an update that moves an instance to another node,
// deregister, conditional deregister, deregister-node, expiry, a node's
// health), applied one entry at a time and in batches, and after a
// snapshot round trip.
func TestNodeIndexAgreesWithTheState(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			rng := rand.New(rand.NewSource(7))
			a := newApplier(t)
			nodes := []string{"n1", "n2", "n3", ""}
			var pending []*raft.Log
			flush := func() {
				if len(pending) > 0 {
					a.fsm.ApplyBatch(pending)
					pending = nil
				}
			}
			for i := 0; i < 3000; i++ {
				p := plugin(fmt.Sprintf("t%d", rng.Intn(3)), fmt.Sprintf("n%d", rng.Intn(5)), fmt.Sprintf("a%d", rng.Intn(4)))
				p.NodeID = nodes[rng.Intn(len(nodes))]
				var req Request
				switch x := rng.Intn(100); {
				case x < 60:
					if rng.Intn(3) == 0 {
						p = leased(p, 30*time.Second)
					}
					req = reg(p)
				case x < 80:
					req = dereg(p.Type, p.Name, p.AllocID)
				case x < 86:
					req = &ConditionalDeregisterRequest{Type: p.Type, Name: p.Name, AllocID: p.AllocID, IfNodeID: nodes[rng.Intn(3)]}
				case x < 90:
					cur := a.fsm.State().Newest(p.Type, p.Name)
					if cur == nil {
						continue
					}
					req = &ExpireRequest{Leases: []ExpiredLease{{Type: cur.Type, Name: cur.Name, AllocID: cur.AllocID, ModifyIndex: cur.ModifyIndex}}}
				case x < 95:
					h := &NodeHealthRequest{NodeID: nodes[rng.Intn(3)]}
					if rng.Intn(2) == 0 {
						h.Suspect, h.Reason, h.LastSeen = true, "failed", time.Unix(1e9, 0).UTC()
					}
					req = h
				default:
					req = &DeregisterNodeRequest{NodeID: nodes[rng.Intn(3)]}
				}
				l := a.entry(req)
				if batched {
					pending = append(pending, l)
					if len(pending) == 1+rng.Intn(16) {
						flush()
					}
				} else {
					a.fsm.Apply(l)
				}
				if i%97 == 0 {
					flush()
					for _, n := range nodes[:3] {
						if got, want := indexed(a.fsm.State(), n), bruteNode(a.fsm.State(), n); !slices.Equal(got, want) {
							t.Fatalf("entry %d, node %s: index %v\nwalk %v", i, n, got, want)
						}
					}
				}
			}
			flush()
			st, err := ReadState(bytes.NewReader(a.snapshot()))
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, n := range nodes[:3] {
				got, want := indexed(st, n), bruteNode(a.fsm.State(), n)
				if !slices.Equal(got, want) {
					t.Fatalf("restored, node %s: index %v\nwalk %v", n, got, want)
				}
				total += len(want)
			}
			if total == 0 {
				t.Fatal("nothing left to compare: the test's mix removes too much")
			}
		})
	}
}
