package fsm

import (
	"cmp"
	"strings"

	"github.com/benbjohnson/immutable"
	"github.com/plugreg/plugreg/api"
)

// recency is one (Type, Name)'s instances, newest registration first. In
// a cluster-wide registry a name has one instance per host running it (a
// CSI node plugin, a device plugin): tens of thousands. A slice scanned
// and copied whole on every write cost O(L) per write (340 µs and 89 KB
// per registration at 10,000 hosts); this is two persistent B+trees
// (benbjohnson/immutable's SortedMap, as the node index is: about 100
// bytes an entry where a radix tree spends 400), so every write is
// O(log L) and shares all but one path with the version before it:
//
//   - order maps a sequence number to the instance, highest first: a
//     registration takes the next number and so goes to the front; a
//     health change keeps its instance's number and so its place.
//   - allocs maps each AllocID to its sequence number: find by alloc.
//
// The numbers are the list's own (next counts per name), never written
// to a snapshot: ReadState numbers a list in the order it was written,
// newest first, so the order, the only thing anyone sees of them, is
// what the snapshot says. Every server applies the same log to the same
// list and numbers it alike, though nothing depends on that.
//
// A recency is never modified once it is in a State: every change
// returns a new one. The nil *recency is the empty list.
type recency struct {
	order  *immutable.SortedMap[uint64, *api.PluginInfo]
	allocs *immutable.SortedMap[string, uint64]
	next   uint64          // the sequence number of the next registration
	newest *api.PluginInfo // order's first value, kept: read on every write
}

// newestFirst orders sequence numbers high to low.
type newestFirst struct{}

func (newestFirst) Compare(a, b uint64) int { return cmp.Compare(b, a) }

// allocOrder orders AllocIDs bytewise.
type allocOrder struct{}

func (allocOrder) Compare(a, b string) int { return strings.Compare(a, b) }

// newRecency builds the list of list's instances, in list's order
// (newest first): one O(L) build for a snapshot's list.
func newRecency(list []*api.PluginInfo) *recency {
	if len(list) == 0 {
		return nil
	}
	order := immutable.NewSortedMapBuilder[uint64, *api.PluginInfo](newestFirst{})
	allocs := immutable.NewSortedMapBuilder[string, uint64](allocOrder{})
	n := uint64(len(list))
	for j, p := range list {
		seq := n - uint64(j)
		order.Set(seq, p)
		allocs.Set(p.AllocID, seq)
	}
	return &recency{order: order.Map(), allocs: allocs.Map(), next: n + 1, newest: list[0]}
}

// Len is the number of instances.
func (r *recency) Len() int {
	if r == nil {
		return 0
	}
	return r.order.Len()
}

// front is the newest instance, or nil.
func (r *recency) front() *api.PluginInfo {
	if r == nil {
		return nil
	}
	return r.newest
}

// find returns allocID's instance and its sequence number.
func (r *recency) find(allocID string) (*api.PluginInfo, uint64, bool) {
	if r == nil {
		return nil, 0, false
	}
	seq, ok := r.allocs.Get(allocID)
	if !ok {
		return nil, 0, false
	}
	p, _ := r.order.Get(seq)
	return p, seq, true
}

// slice returns the instances, newest first, in a new slice.
func (r *recency) slice() []*api.PluginInfo {
	if r == nil {
		return nil
	}
	out := make([]*api.PluginInfo, 0, r.order.Len())
	for itr := r.order.Iterator(); !itr.Done(); {
		_, p, _ := itr.Next()
		out = append(out, p)
	}
	return out
}

// withFront returns the list with p in front, in place of the instance
// of p's AllocID if there was one.
func (r *recency) withFront(p *api.PluginInfo) *recency {
	if r == nil {
		r = &recency{order: immutable.NewSortedMap[uint64, *api.PluginInfo](newestFirst{}),
			allocs: immutable.NewSortedMap[string, uint64](allocOrder{}), next: 1}
	}
	order := r.order
	if old, ok := r.allocs.Get(p.AllocID); ok {
		order = order.Delete(old)
	}
	seq := r.next
	return &recency{order: order.Set(seq, p), allocs: r.allocs.Set(p.AllocID, seq), next: seq + 1, newest: p}
}

// without returns the list without the instance numbered seq, of
// allocID; nil when it was the last.
func (r *recency) without(allocID string, seq uint64) *recency {
	if r.Len() <= 1 {
		return nil
	}
	out := &recency{order: r.order.Delete(seq), allocs: r.allocs.Delete(allocID), next: r.next, newest: r.newest}
	if r.newest.AllocID == allocID {
		_, out.newest, _ = out.order.Iterator().Next()
	}
	return out
}

// replaced returns the list with p in place of the instance numbered
// seq (of p's AllocID), which keeps its place.
func (r *recency) replaced(seq uint64, p *api.PluginInfo) *recency {
	out := &recency{order: r.order.Set(seq, p), allocs: r.allocs, next: r.next, newest: r.newest}
	if r.newest.AllocID == p.AllocID {
		out.newest = p
	}
	return out
}

// seqOf is allocID's sequence number in r: callers know it is there.
func (r *recency) seqOf(allocID string) uint64 {
	seq, _ := r.allocs.Get(allocID)
	return seq
}
