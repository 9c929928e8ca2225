package fsm

import (
	"fmt"
	"slices"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"github.com/plugreg/plugreg/api"
)

// recency is one (Type, Name)'s instances, newest registration first. A
// recency slice is never modified once it is in a State: changes build a
// new slice (lists are short; a name has one instance per allocation).
type recency []*api.PluginInfo

func (r recency) find(allocID string) int {
	for i, p := range r {
		if p.AllocID == allocID {
			return i
		}
	}
	return -1
}

// without returns a new list without position i.
func (r recency) without(i int) recency {
	out := make(recency, 0, len(r)-1)
	out = append(out, r[:i]...)
	return append(out, r[i+1:]...)
}

// withFront returns a new list with p in front, dropping position skip
// (-1 drops nothing).
func (r recency) withFront(p *api.PluginInfo, skip int) recency {
	out := make(recency, 0, len(r)+1)
	out = append(out, p)
	for i, q := range r {
		if i != skip {
			out = append(out, q)
		}
	}
	return out
}

type nameTree = iradix.Tree[recency]

// State is one immutable version of the registry: every type, name and
// recency list as of Index. Readers may hold a State as long as they like;
// Apply never changes it. Every *PluginInfo it returns is shared and must
// not be modified (copy it first).
type State struct {
	types     *iradix.Tree[*nameTree]
	nodes     *nodeTree // the node index (nodeindex.go)
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
// transaction only changes nodes it created itself. (The node index,
// a B+tree, has no transactions in its library's version: each entry
// copies its path, as it would outside a batch.)
type batch struct {
	types *iradix.Txn[*nameTree]
	names map[string]*iradix.Txn[recency] // open name trees, by type
}

// beginBatch opens the transactions; commitBatch closes them into new
// trees. Between the two, reads and writes of s go through them.
func (s *State) beginBatch() {
	s.batch = &batch{types: s.types.Txn(), names: map[string]*iradix.Txn[recency]{}}
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
	names.Root().Walk(func(_ []byte, r recency) bool {
		out = append(out, r[0])
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

// Instances returns the recency list of (ptype, name), newest first, or nil.
func (s *State) Instances(ptype, name string) []*api.PluginInfo {
	r := s.recency(ptype, name)
	if r == nil {
		return nil
	}
	return append([]*api.PluginInfo(nil), r...)
}

// Newest returns the newest instance of (ptype, name), or nil.
func (s *State) Newest(ptype, name string) *api.PluginInfo {
	if r := s.recency(ptype, name); r != nil {
		return r[0]
	}
	return nil
}

// Instance returns one instance, or nil.
func (s *State) Instance(ptype, name, allocID string) *api.PluginInfo {
	r := s.recency(ptype, name)
	if i := r.find(allocID); i >= 0 {
		return r[i]
	}
	return nil
}

// Walk calls fn for every (type, name) in order with its recency list,
// newest first, until fn returns false. fn must not keep or change list.
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
		names.Root().Walk(func(nk []byte, r recency) bool {
			stop = !fn(t, string(nk), r)
			return stop
		})
		return stop
	})
}

// Request returns the recorded outcome of the write with request ID id, if
// it is still in the window. It scans the window (the apply path has its
// own map), so any goroutine may call it: for tests and tools.
func (s *State) Request(id string) (RequestRecord, bool) { return s.requests.find(id) }

func (s *State) recency(ptype, name string) recency {
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
func (s *State) put(ptype, name string, r recency) {
	tk, nk := []byte(ptype), []byte(name)
	if b := s.batch; b != nil {
		nt, ok := b.names[ptype]
		if !ok {
			names, ok := b.types.Get(tk)
			if !ok {
				names = iradix.New[recency]()
			}
			nt = names.Txn()
			b.names[ptype] = nt
		}
		if len(r) == 0 {
			nt.Delete(nk)
		} else {
			nt.Insert(nk, r)
		}
		return // commitBatch puts the name tree into the type tree
	}
	names, ok := s.types.Get(tk)
	if !ok {
		names = iradix.New[recency]()
	}
	if len(r) == 0 {
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
	pos := r.find(in.AllocID)
	if pos >= 0 && api.SameContent(r[pos], in) {
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
	if pos >= 0 && api.SameButHealth(r[pos], p) {
		// A health change: the instance keeps its place in the recency
		// list (it was not registered anew).
		p.CreateIndex = r[pos].CreateIndex
		return api.ResultUpdated, []Event{s.replaceAt(index, r, pos, p)}
	}
	if pos >= 0 {
		p.CreateIndex = r[pos].CreateIndex
		res, ev = api.ResultUpdated, api.EventUpdated
	} else {
		p.CreateIndex = index
		s.instances++
	}
	if pos >= 0 {
		s.nodeReplace(r[pos], p)
	} else {
		s.nodeInsert(p)
	}
	s.put(p.Type, p.Name, r.withFront(p, pos))
	return res, []Event{{Index: index, EventType: ev, Info: p, Current: p}}
}

func (s *State) deregister(index uint64, ptype, name, allocID string) (api.Result, []Event) {
	r := s.recency(ptype, name)
	pos := r.find(allocID)
	if pos < 0 {
		return api.ResultAbsent, nil
	}
	return api.ResultDeregistered, []Event{s.removeAt(index, ptype, name, r, pos, api.EventDeregistered)}
}

// removeAt removes position pos of r, the recency list of (ptype, name),
// and returns the removal's event, of type ev.
func (s *State) removeAt(index uint64, ptype, name string, r recency, pos int, ev api.EventType) Event {
	removed := r[pos]
	rest := r.without(pos)
	s.nodeDelete(removed)
	s.put(ptype, name, rest)
	s.instances--
	return Event{Index: index, EventType: ev, Info: removed, Current: rest.front()}
}

// replaceAt puts p in place of position pos of r, the recency list of p's
// name, keeping the order (a change of health is no new registration),
// and returns the health event.
func (s *State) replaceAt(index uint64, r recency, pos int, p *api.PluginInfo) Event {
	next := slices.Clone(r)
	next[pos] = p
	s.nodeReplace(r[pos], p)
	s.put(p.Type, p.Name, next)
	return Event{Index: index, EventType: api.EventHealth, Info: p, Current: next.front()}
}

// checkCondition refuses a conditional deregister whose instance exists
// but no longer matches. An absent instance passes: removing it is
// "absent" either way.
func (s *State) checkCondition(r *ConditionalDeregisterRequest) error {
	p := s.recency(r.Type, r.Name)
	pos := p.find(r.AllocID)
	if pos < 0 {
		return nil
	}
	cur := p[pos]
	if r.IfNodeID != "" && cur.NodeID != r.IfNodeID {
		return fmt.Errorf("deregister %s/%s/%s: %w: it belongs to node %q, not %q", r.Type, r.Name, r.AllocID, api.ErrConflict, cur.NodeID, r.IfNodeID)
	}
	if r.IfModifyIndex != 0 && cur.ModifyIndex != r.IfModifyIndex {
		return fmt.Errorf("deregister %s/%s/%s: %w: last changed at index %d, not %d", r.Type, r.Name, r.AllocID, api.ErrConflict, cur.ModifyIndex, r.IfModifyIndex)
	}
	return nil
}

func (s *State) deregisterNode(index uint64, nodeID string) (api.Result, []Event) {
	// The node's (Type, Name)s, from the node index, in order.
	type tn struct{ ptype, name string }
	var hits []tn
	for _, p := range s.NodeInstances(nodeID) {
		if h := (tn{p.Type, p.Name}); len(hits) == 0 || hits[len(hits)-1] != h {
			hits = append(hits, h)
		}
	}
	if len(hits) == 0 {
		return api.ResultAbsent, nil
	}
	var events []Event
	for _, h := range hits {
		rest := s.recency(h.ptype, h.name)
		for i := 0; i < len(rest); {
			if rest[i].NodeID != nodeID {
				i++
				continue
			}
			removed := rest[i]
			rest = rest.without(i)
			s.nodeDelete(removed)
			s.instances--
			events = append(events, Event{Index: index, EventType: api.EventDeregistered, Info: removed, Current: rest.front()})
		}
		s.put(h.ptype, h.name, rest)
	}
	return api.ResultDeregistered, events
}

func (r recency) front() *api.PluginInfo {
	if len(r) == 0 {
		return nil
	}
	return r[0]
}
