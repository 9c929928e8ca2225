package fsm

import (
	"strings"

	"github.com/benbjohnson/immutable"
	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"github.com/plugreg/plugreg/api"
)

// The node index: every instance with a NodeID, keyed
// NodeID\x00Type\x00Name\x00AllocID (no part can hold a control character,
// so a node's instances are exactly the keys under "NodeID\x00"). It is
// derived from the recency lists (put keeps it in step; ReadState builds
// it), never part of a snapshot, so the snapshot format does not change. It
// turns "this node's instances" (anti-entropy's read, DeregisterNode, the
// leader's reaping) from a walk of the whole state into a prefix scan.
//
// It is a persistent B+tree (benbjohnson/immutable's SortedMap), not a
// radix tree like the name trees: it holds one entry per instance, and
// go-immutable-radix spends about 400 bytes on each (a node, a leaf and
// two channels per key), a B+tree about 100 (the key and a slot in a
// leaf of 32). At a million instances that was 40% of the state's heap.
type nodeTree = immutable.SortedMap[string, *api.PluginInfo]

// keyOrder orders the index's keys bytewise.
type keyOrder struct{}

func (keyOrder) Compare(a, b string) int { return strings.Compare(a, b) }

func newNodeTree() *nodeTree { return immutable.NewSortedMap[string, *api.PluginInfo](keyOrder{}) }

func nodeKey(p *api.PluginInfo) string {
	return p.NodeID + "\x00" + p.Type + "\x00" + p.Name + "\x00" + p.AllocID
}

func nodePrefix(nodeID string) string { return nodeID + "\x00" }

// Each change to a recency list tells the node index what it did (put
// does not): one instance in (nodeInsert), out (nodeDelete) or in place
// of another (nodeReplace). Diffing the lists before and after instead,
// as put once did, looked every instance of the name up in the other
// list: quadratic in the list's length, on every write.
//
// nodeInsert and nodeDelete replace the State's tree (a batch's State is
// private until published, so the batch simply moves its root along).
func (s *State) nodeInsert(p *api.PluginInfo) {
	if p.NodeID == "" {
		return
	}
	s.nodes = s.nodes.Set(nodeKey(p), p)
}

// nodeReplace indexes p in place of old, an instance of the same
// (Type, Name, AllocID): under the same key unless the node changed.
func (s *State) nodeReplace(old, p *api.PluginInfo) {
	if old.NodeID != p.NodeID {
		s.nodeDelete(old)
	}
	s.nodeInsert(p)
}

func (s *State) nodeDelete(p *api.PluginInfo) {
	if p.NodeID == "" {
		return
	}
	s.nodes = s.nodes.Delete(nodeKey(p))
}

// NodeInstances returns every instance registered with nodeID, by Type,
// Name and AllocID. They are the state's own: read-only.
func (s *State) NodeInstances(nodeID string) []*api.PluginInfo {
	if nodeID == "" {
		return nil
	}
	var out []*api.PluginInfo
	prefix := nodePrefix(nodeID)
	itr := s.nodes.Iterator()
	itr.Seek(prefix)
	for !itr.Done() {
		k, p, _ := itr.Next()
		if !strings.HasPrefix(k, prefix) {
			break
		}
		out = append(out, p)
	}
	return out
}

// HasNodeInstances reports whether any instance is registered with nodeID:
// one seek, where NodeInstances collects them all.
func (s *State) HasNodeInstances(nodeID string) bool {
	if nodeID == "" {
		return false
	}
	prefix := nodePrefix(nodeID)
	itr := s.nodes.Iterator()
	itr.Seek(prefix)
	if itr.Done() {
		return false
	}
	k, _, _ := itr.Next()
	return strings.HasPrefix(k, prefix)
}

// buildNodeIndex indexes every instance of s (after ReadState).
func buildNodeIndex(types *iradix.Tree[*nameTree]) *nodeTree {
	b := immutable.NewSortedMapBuilder[string, *api.PluginInfo](keyOrder{})
	types.Root().Walk(func(_ []byte, names *nameTree) bool {
		names.Root().Walk(func(_ []byte, r *recency) bool {
			for itr := r.order.Iterator(); !itr.Done(); {
				if _, p, _ := itr.Next(); p.NodeID != "" {
					b.Set(nodeKey(p), p)
				}
			}
			return false
		})
		return false
	})
	return b.Map()
}
