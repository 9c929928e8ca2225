package fsm

import (
	"fmt"
	"slices"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"github.com/plugreg/plugreg/api"
)

// nameTree is one type's names and their recency lists (recency.go).
type nameTree = iradix.Tree[*recency]

// State is one immutable version of the registry: every type, name and
// recency list as of Index. Readers may hold a State as long as they like;
// Apply never changes it. Every *PluginInfo it returns is shared and must
// not be modified (copy it first).
type State struct {
	types *iradix.Tree[*nameTree]
	nodes *nodeTree // the node index (nodeindex.go)
	// ownNodes is nodes while this State is being built and has written
	// to it: a clone only it writes (writableNodes). Nil in every State
	// anyone else can see.
	ownNodes  *nodeTree
	index     uint64
	instances int
	requests  requests
	acl       *aclState // nil: no ACL token, never bootstrapped (acl.go)
	interned  *interner // shared by every State of one FSM (intern.go)
	// batch holds the open radix transactions while ApplyBatch builds
	// this State; nil in every State anyone else can see.
	batch *batch
}

// batch is one ApplyBatch's transactions over the state's trees. One
// transaction per tree for the whole batch copies each tree path once and
// then changes the copied nodes in place, instead of copying the path
// from the root again for every entry (a radix Insert on a Tree is a
// transaction of its own). The published trees are never touched: a
// transaction only changes nodes it created itself. The node index's
// clone does the same, batch or not (nodeindex.go). (The recency lists'
// B+trees, recency.go, copy their path on each entry: a path is O(log L)
// nodes, and a batch's writes mostly touch different names' lists, so a
// transaction would save little there.)
type batch struct {
	types *iradix.Txn[*nameTree]
	names map[string]*iradix.Txn[*recency] // open name trees, by type
}

// beginBatch opens the transactions; commitBatch closes them into new
// trees. Between the two, reads and writes of s go through them.
func (s *State) beginBatch() {
	s.batch = &batch{types: s.types.Txn(), names: map[string]*iradix.Txn[*recency]{}}
}

func (s *State) commitBatch() {
	b := s.batch
	if b == nil {
		return
	}
	s.batch = nil
	// The final trees depend only on their keys and values, not on the
	// order of these inserts, so the map's random order is harmless.
	for t, nt := range b.names {
		names := nt.Commit()
		if names.Len() == 0 {
			b.types.Delete([]byte(t))
		} else {
			b.types.Insert([]byte(t), names)
		}
	}
	s.types = b.types.Commit()
}

// NewState returns the empty state at index 0.
func NewState() *State {
	return &State{types: iradix.New[*nameTree](), nodes: newNodeTree(), requests: newRequests(), interned: newInterner()}
}

// Index is the index of the last log entry applied to this state. It counts
// every entry the FSM was handed, including no-ops and rejected commands.
func (s *State) Index() uint64 { return s.index }

// Rebased returns the same contents as of a later index. An operator's
// restore of a backup carries the index of the Raft snapshot that
// installs it, because FSM.Restore never goes back (see Restore).
func (s *State) Rebased(index uint64) *State {
	c := *s
	c.index = max(index, s.index)
	return &c
}

// Len is the number of plugin instances.
func (s *State) Len() int { return s.instances }

// Types lists the plugin types with at least one instance, sorted.
func (s *State) Types() []string {
	out := make([]string, 0, s.types.Len())
	s.types.Root().Walk(func(k []byte, _ *nameTree) bool {
		out = append(out, string(k))
		return false
	})
	return out
}

// List returns the newest instance of every name of ptype, sorted by name.
func (s *State) List(ptype string) []*api.PluginInfo {
	names, ok := s.types.Get([]byte(ptype))
	if !ok {
		return nil
	}
	out := make([]*api.PluginInfo, 0, names.Len())
	names.Root().Walk(func(_ []byte, r *recency) bool {
		out = append(out, r.front())
		return false
	})
	return out
}

// TypeInstances returns every instance of ptype, of every name (by name,
// each name's newest first), or nil.
func (s *State) TypeInstances(ptype string) []*api.PluginInfo {
	var out []*api.PluginInfo
	s.WalkTypes([]string{ptype}, func(_, _ string, list []*api.PluginInfo) bool {
		out = append(out, list...)
		return true
	})
	return out
}

// Instances returns the recency list of (ptype, name), newest first, or nil:
// a new slice, O(L). List, Newest and Instance are O(log L) per name.
func (s *State) Instances(ptype, name string) []*api.PluginInfo {
	return s.recency(ptype, name).slice()
}

// Newest returns the newest instance of (ptype, name), or nil.
func (s *State) Newest(ptype, name string) *api.PluginInfo {
	return s.recency(ptype, name).front()
}

// Instance returns one instance, or nil.
func (s *State) Instance(ptype, name, allocID string) *api.PluginInfo {
	p, _, _ := s.recency(ptype, name).find(allocID)
	return p
}

// Walk calls fn for every (type, name) in order with its recency list,
// newest first, until fn returns false. fn must not keep or change list.
// Each list is built for the call (O(L)): a walk reads everything anyway.
func (s *State) Walk(fn func(ptype, name string, list []*api.PluginInfo) bool) {
	s.WalkTypes(nil, fn)
}

// WalkTypes is Walk restricted to the given types (all when types is
// empty), still in (type, name) order.
func (s *State) WalkTypes(types []string, fn func(ptype, name string, list []*api.PluginInfo) bool) {
	want := func(string) bool { return true }
	if len(types) > 0 {
		set := make(map[string]bool, len(types))
		for _, t := range types {
			set[t] = true
		}
		want = func(t string) bool { return set[t] }
	}
	stop := false
	s.types.Root().Walk(func(tk []byte, names *nameTree) bool {
		t := string(tk)
		if !want(t) {
			return false
		}
		names.Root().Walk(func(nk []byte, r *recency) bool {
			stop = !fn(t, string(nk), r.slice())
			return stop
		})
		return stop
	})
}

// Request returns the recorded outcome of the write with request ID id, if
// it is still in the window. It scans the window (the apply path has its
// own map), so any goroutine may call it: for tests and tools.
func (s *State) Request(id string) (RequestRecord, bool) { return s.requests.find(id) }

func (s *State) recency(ptype, name string) *recency {
	if s.batch != nil {
		if nt, ok := s.batch.names[ptype]; ok {
			r, _ := nt.Get([]byte(name))
			return r
		}
		names, ok := s.batch.types.Get([]byte(ptype))
		if !ok {
			return nil
		}
		r, _ := names.Get([]byte(name))
		return r
	}
	names, ok := s.types.Get([]byte(ptype))
	if !ok {
		return nil
	}
	r, _ := names.Get([]byte(name))
	return r
}

// put replaces the recency list of (ptype, name) with r; an empty list
// removes the name, and the type with its last name. The caller keeps the
// node index in step (nodeInsert, nodeDelete, nodeReplace).
func (s *State) put(ptype, name string, r *recency) {
	tk, nk := []byte(ptype), []byte(name)
	if b := s.batch; b != nil {
		nt, ok := b.names[ptype]
		if !ok {
			names, ok := b.types.Get(tk)
			if !ok {
				names = iradix.New[*recency]()
			}
			nt = names.Txn()
			b.names[ptype] = nt
		}
		if r.Len() == 0 {
			nt.Delete(nk)
		} else {
			nt.Insert(nk, r)
		}
		return // commitBatch puts the name tree into the type tree
	}
	names, ok := s.types.Get(tk)
	if !ok {
		names = iradix.New[*recency]()
	}
	if r.Len() == 0 {
		names, _, _ = names.Delete(nk)
	} else {
		names, _, _ = names.Insert(nk, r)
	}
	if names.Len() == 0 {
		s.types, _, _ = s.types.Delete(tk)
	} else {
		s.types, _, _ = s.types.Insert(tk, names)
	}
}

// The mutators below work on a State that the FSM copied for the entry (or
// batch) being applied and has not yet published. They replace tree roots;
// they never modify a tree, list or PluginInfo another State can see.

func (s *State) register(index uint64, in *api.PluginInfo) (api.Result, []Event) {
	r := s.recency(in.Type, in.Name)
	old, seq, found := r.find(in.AllocID)
	if found && api.SameContent(old, in) {
		return api.ResultUnchanged, nil
	}
	// in was decoded from this entry by apply and nobody else holds it:
	// the state keeps it as it is (no copy), and its Options map may
	// become the shared one (intern.go).
	p := in
	p.Options = s.interned.optionsOf(p.Options)
	s.interned.internStrings(p)
	p.ModifyIndex = index
	res, ev := api.ResultRegistered, api.EventRegistered
	if found && api.SameButHealth(old, p) {
		// A health change: the instance keeps its place in the recency
		// list (it was not registered anew).
		p.CreateIndex = old.CreateIndex
		return api.ResultUpdated, []Event{s.replaceAt(index, r, seq, old, p)}
	}
	if found {
		p.CreateIndex = old.CreateIndex
		res, ev = api.ResultUpdated, api.EventUpdated
		s.nodeReplace(old, p)
	} else {
		p.CreateIndex = index
		s.instances++
		s.nodeInsert(p)
	}
	s.put(p.Type, p.Name, r.withFront(p))
	return res, []Event{{Index: index, EventType: ev, Info: p, Current: p}}
}

func (s *State) deregister(index uint64, ptype, name, allocID string) (api.Result, []Event) {
	r := s.recency(ptype, name)
	old, seq, found := r.find(allocID)
	if !found {
		return api.ResultAbsent, nil
	}
	return api.ResultDeregistered, []Event{s.removeAt(index, r, seq, old, api.EventDeregistered)}
}

// removeAt removes removed, numbered seq in r (its name's recency list),
// and returns the removal's event, of type ev.
func (s *State) removeAt(index uint64, r *recency, seq uint64, removed *api.PluginInfo, ev api.EventType) Event {
	rest := r.without(removed.AllocID, seq)
	s.nodeDelete(removed)
	s.put(removed.Type, removed.Name, rest)
	s.instances--
	return Event{Index: index, EventType: ev, Info: removed, Current: rest.front()}
}

// replaceAt puts p in place of old, numbered seq in r (p's name's recency
// list), keeping the order (a change of health is no new registration),
// and returns the health event.
func (s *State) replaceAt(index uint64, r *recency, seq uint64, old, p *api.PluginInfo) Event {
	next := r.replaced(seq, p)
	s.nodeReplace(old, p)
	s.put(p.Type, p.Name, next)
	return Event{Index: index, EventType: api.EventHealth, Info: p, Current: next.front()}
}

// checkCondition refuses a conditional deregister whose instance exists
// but no longer matches. An absent instance passes: removing it is
// "absent" either way.
func (s *State) checkCondition(r *ConditionalDeregisterRequest) error {
	cur, _, found := s.recency(r.Type, r.Name).find(r.AllocID)
	if !found {
		return nil
	}
	if r.IfNodeID != "" && cur.NodeID != r.IfNodeID {
		return fmt.Errorf("deregister %s/%s/%s: %w: it belongs to node %q, not %q", r.Type, r.Name, r.AllocID, api.ErrConflict, cur.NodeID, r.IfNodeID)
	}
	if r.IfModifyIndex != 0 && cur.ModifyIndex != r.IfModifyIndex {
		return fmt.Errorf("deregister %s/%s/%s: %w: last changed at index %d, not %d", r.Type, r.Name, r.AllocID, api.ErrConflict, cur.ModifyIndex, r.IfModifyIndex)
	}
	return nil
}

// deregisterNode removes the node's instances, found in the node index
// (by Type, Name, AllocID): O(log L) each. Within one name they go
// newest first, in recency-list order, so the events (and each one's
// Current) come out in the order every replica and older release emits.
func (s *State) deregisterNode(index uint64, nodeID string) (api.Result, []Event) {
	mine := s.NodeInstances(nodeID)
	if len(mine) == 0 {
		return api.ResultAbsent, nil
	}
	var events []Event
	for len(mine) > 0 {
		n := 1
		for n < len(mine) && mine[n].Type == mine[0].Type && mine[n].Name == mine[0].Name {
			n++
		}
		group := mine[:n]
		mine = mine[n:]
		r := s.recency(group[0].Type, group[0].Name)
		if len(group) > 1 {
			// Sequence numbers are unique in a list: the sort is total.
			slices.SortFunc(group, func(a, b *api.PluginInfo) int { return newestFirst{}.Compare(r.seqOf(a.AllocID), r.seqOf(b.AllocID)) })
		}
		for _, p := range group {
			ev := s.removeAt(index, r, r.seqOf(p.AllocID), p, api.EventDeregistered)
			r = s.recency(p.Type, p.Name)
			events = append(events, ev)
		}
	}
	return api.ResultDeregistered, events
}
