package fsm

import (
	iradix "github.com/hashicorp/go-immutable-radix/v2"
)

// The node index: every instance with a NodeID, keyed
// NodeID\x00Type\x00Name\x00AllocID (no part can hold a control character,
// so a node's instances are exactly the keys under "NodeID\x00"). It is
// derived from the recency lists (put keeps it in step; ReadState builds
// it), never part of a snapshot, so the snapshot format does not change. It
// turns "this node's instances" (anti-entropy's read, DeregisterNode, the
// leader's reaping) from a walk of the whole state into a prefix scan.
type nodeTree = iradix.Tree[*PluginInfo]

func nodeKey(p *PluginInfo) []byte {
	return []byte(p.NodeID + "\x00" + p.Type + "\x00" + p.Name + "\x00" + p.AllocID)
}

func nodePrefix(nodeID string) []byte { return []byte(nodeID + "\x00") }

// reindex brings the node index from old to new, one (Type, Name)'s
// recency list before and after a change.
func (s *State) reindex(old, new recency) {
	for _, p := range old {
		if q := new.byAlloc(p.AllocID); q == nil || q.NodeID != p.NodeID {
			s.nodeDelete(p)
		}
	}
	for _, p := range new {
		if q := old.byAlloc(p.AllocID); q != p {
			s.nodeInsert(p)
		}
	}
}

func (r recency) byAlloc(allocID string) *PluginInfo {
	if i := r.find(allocID); i >= 0 {
		return r[i]
	}
	return nil
}

func (s *State) nodeInsert(p *PluginInfo) {
	if p.NodeID == "" {
		return
	}
	if s.batch != nil {
		s.batch.nodes.Insert(nodeKey(p), p)
		return
	}
	s.nodes, _, _ = s.nodes.Insert(nodeKey(p), p)
}

func (s *State) nodeDelete(p *PluginInfo) {
	if p.NodeID == "" {
		return
	}
	if s.batch != nil {
		s.batch.nodes.Delete(nodeKey(p))
		return
	}
	s.nodes, _, _ = s.nodes.Delete(nodeKey(p))
}

// NodeInstances returns every instance registered with nodeID, by Type,
// Name and AllocID. They are the state's own: read-only.
func (s *State) NodeInstances(nodeID string) []*PluginInfo {
	if nodeID == "" {
		return nil
	}
	var out []*PluginInfo
	var root *iradix.Node[*PluginInfo]
	if s.batch != nil {
		root = s.batch.nodes.Root()
	} else {
		root = s.nodes.Root()
	}
	root.WalkPrefix(nodePrefix(nodeID), func(_ []byte, p *PluginInfo) bool {
		out = append(out, p)
		return false
	})
	return out
}

// buildNodeIndex indexes every instance of s (after ReadState).
func buildNodeIndex(types *iradix.Tree[*nameTree]) *nodeTree {
	txn := iradix.New[*PluginInfo]().Txn()
	types.Root().Walk(func(_ []byte, names *nameTree) bool {
		names.Root().Walk(func(_ []byte, r recency) bool {
			for _, p := range r {
				if p.NodeID != "" {
					txn.Insert(nodeKey(p), p)
				}
			}
			return false
		})
		return false
	})
	return txn.Commit()
}
