package fsm

import (
	"strings"

	"github.com/google/btree"
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
// It is a copy-on-write B-tree (google/btree, whose Clone etcd's key
// index uses the same way), not a radix tree like the name trees: it holds
// one entry per instance, and go-immutable-radix spends about 400 bytes on
// each (a node, a leaf and two channels per key), a B-tree under 100 (the
// key and a slot in a node of up to 31). At a million instances that was
// 40% of the state's heap. The State the FSM builds writes a clone
// (writableNodes): its first write to a node copies the node, its later
// writes change that copy in place, so a batch copies each path once, not
// once per entry, as the radix transactions do for the name trees. A
// State's tree is never written once published.
type nodeTree = btree.BTreeG[nodeEntry]

// nodeEntry is one instance in the node index, under its nodeKey.
type nodeEntry struct {
	key string
	p   *api.PluginInfo
}

// nodeDegree makes nodes of 15 to 31 entries (the root fewer).
const nodeDegree = 16

func newNodeTree() *nodeTree {
	return btree.NewG(nodeDegree, func(a, b nodeEntry) bool { return a.key < b.key })
}

// writableNodes returns the node index this State's writes go to: a
// clone of the published tree, made at the State's first write to it and
// kept until the FSM publishes the State (applyCommands clears it), so an
// entry or batch that changes many instances copies each path once.
// Clone writes the tree it copies (its copy-on-write context, which no
// reader uses): only the FSM's writer calls it.
func (s *State) writableNodes() *nodeTree {
	if s.ownNodes == nil {
		s.ownNodes = s.nodes.Clone()
		s.nodes = s.ownNodes
	}
	return s.ownNodes
}

func nodeKey(p *api.PluginInfo) string {
	return p.NodeID + "\x00" + p.Type + "\x00" + p.Name + "\x00" + p.AllocID
}

func nodePrefix(nodeID string) string { return nodeID + "\x00" }

// Each change to a recency list tells the node index what it did (put
// does not): one instance in (nodeInsert), out (nodeDelete) or in place
// of another (nodeReplace). Diffing the lists before and after instead,
// as put once did, looked every instance of the name up in the other
// list: quadratic in the list's length, on every write.
func (s *State) nodeInsert(p *api.PluginInfo) {
	if p.NodeID == "" {
		return
	}
	s.writableNodes().ReplaceOrInsert(nodeEntry{nodeKey(p), p})
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
	s.writableNodes().Delete(nodeEntry{key: nodeKey(p)})
}

// NodeInstances returns every instance registered with nodeID, by Type,
// Name and AllocID. They are the state's own: read-only.
func (s *State) NodeInstances(nodeID string) []*api.PluginInfo {
	if nodeID == "" {
		return nil
	}
	var out []*api.PluginInfo
	prefix := nodePrefix(nodeID)
	s.nodes.AscendGreaterOrEqual(nodeEntry{key: prefix}, func(e nodeEntry) bool {
		if !strings.HasPrefix(e.key, prefix) {
			return false
		}
		out = append(out, e.p)
		return true
	})
	return out
}

// HasNodeInstances reports whether any instance is registered with nodeID:
// one seek, where NodeInstances collects them all.
func (s *State) HasNodeInstances(nodeID string) bool {
	if nodeID == "" {
		return false
	}
	prefix := nodePrefix(nodeID)
	found := false
	s.nodes.AscendGreaterOrEqual(nodeEntry{key: prefix}, func(e nodeEntry) bool {
		found = strings.HasPrefix(e.key, prefix)
		return false
	})
	return found
}

// buildNodeIndex indexes every instance of s (after ReadState).
func buildNodeIndex(types *iradix.Tree[*nameTree]) *nodeTree {
	t := newNodeTree()
	types.Root().Walk(func(_ []byte, names *nameTree) bool {
		names.Root().Walk(func(_ []byte, r *recency) bool {
			for itr := r.order.Iterator(); !itr.Done(); {
				if _, p, _ := itr.Next(); p.NodeID != "" {
					t.ReplaceOrInsert(nodeEntry{nodeKey(p), p})
				}
			}
			return false
		})
		return false
	})
	return t
}
