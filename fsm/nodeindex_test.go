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
// snapshot round trip; and an index once published never changes.
func TestNodeIndexAgreesWithTheState(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			rng := rand.New(rand.NewSource(7))
			a := newApplier(t)
			nodes := []string{"n1", "n2", "n3", ""}
			var pending []*raft.Log
			type published struct {
				st    *State
				index map[string][]string // node -> its instances, when published
			}
			var old []published
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
					seen := published{st: a.fsm.State(), index: map[string][]string{}}
					for _, n := range nodes[:3] {
						got, want := indexed(seen.st, n), bruteNode(seen.st, n)
						if !slices.Equal(got, want) {
							t.Fatalf("entry %d, node %s: index %v\nwalk %v", i, n, got, want)
						}
						seen.index[n] = got
					}
					old = append(old, seen)
				}
			}
			flush()
			// A published State's index never changes: the writes after it
			// went to copies (its readers hold it without a lock).
			for _, seen := range old {
				for n, want := range seen.index {
					if got := indexed(seen.st, n); !slices.Equal(got, want) {
						t.Fatalf("state at %d, node %s: changed after it was published: %v, was %v", seen.st.Index(), n, got, want)
					}
				}
			}
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

// The node index's copy-on-write, as the FSM uses it (a clone per
// published State, written by the next State only), under enough inserts
// and deletes to split and merge its nodes: every published version keeps
// exactly what it held. (google/btree's issue 60 reports a merge that
// wrote a node its clone shared; this is the check for our use of it.)
func TestNodeTreeClonesNeverChange(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	type version struct {
		tree *nodeTree
		keys []string
	}
	var versions []version
	published := newNodeTree()
	live := map[string]bool{}
	for round := 0; round < 400; round++ {
		next := published.Clone()
		// Grow for a while, then mostly shrink, then grow again: the
		// shrinking rounds merge and steal between nodes.
		deletes := 20
		if round%200 >= 100 {
			deletes = 80
		}
		for op := 0; op < 1+rng.Intn(100); op++ {
			k := fmt.Sprintf("n%04d\x00t\x00name\x00a", rng.Intn(5000))
			if rng.Intn(100) < deletes {
				next.Delete(nodeEntry{key: k})
				delete(live, k)
			} else {
				next.ReplaceOrInsert(nodeEntry{key: k})
				live[k] = true
			}
		}
		published = next
		if round%7 == 0 {
			var keys []string
			for k := range live {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			versions = append(versions, version{published, keys})
		}
	}
	for i, v := range versions {
		var got []string
		v.tree.Ascend(func(e nodeEntry) bool {
			got = append(got, e.key)
			return true
		})
		if !slices.Equal(got, v.keys) {
			t.Fatalf("version %d changed after it was published: %d keys, held %d", i, len(got), len(v.keys))
		}
	}
	if len(versions[len(versions)-1].keys) < 100 {
		t.Fatal("the mix left too few keys to split nodes")
	}
}
