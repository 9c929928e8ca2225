package fsm

import (
	"encoding/binary"
	"slices"
	"unique"

	"github.com/plugreg/plugreg/api"
)

// Equal values are stored once. At a million instances the state was
// about 1 KB of heap per instance (BenchmarkHeap1M), a third of it a
// private copy of each instance's Options map (a Go map of one entry
// costs over 300 bytes) although most plugins of a fleet carry the same
// few option sets, and the repeated Type, Name, Version and NodeID
// strings as decoded from each entry. Instances in a State are read-only
// and shared (see State), so instances with equal options can share one
// map and equal strings one backing array. Interning changes no value:
// what is stored, snapshotted and returned is equal to what was
// registered, so the snapshot bytes and every node's state are as before.

// maxInternedOptions bounds the option sets kept for sharing. A fleet has
// a few distinct ones; a registry whose every instance has its own options
// gains nothing, and the table is then emptied whenever it fills rather
// than grow with the registry.
const maxInternedOptions = 4096

// interner is owned by the FSM's apply goroutine (and by ReadState while
// it builds a state): States carry a pointer to it, readers never use it.
type interner struct {
	options map[string]map[string]string
}

func newInterner() *interner {
	return &interner{options: map[string]map[string]string{}}
}

// internStrings makes p's repeated strings share one copy per value
// (unique's table is weak: a value no instance holds any more is freed).
func internStrings(p *api.PluginInfo) {
	p.Type = unique.Make(p.Type).Value()
	p.Name = unique.Make(p.Name).Value()
	if p.Version != "" {
		p.Version = unique.Make(p.Version).Value()
	}
	if p.NodeID != "" {
		p.NodeID = unique.Make(p.NodeID).Value()
	}
}

// optionsOf returns a map equal to m that instances share. m must be
// private to the caller (freshly decoded): it may become the shared one.
// An empty map stays what it is (nil and empty encode differently).
func (in *interner) optionsOf(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	key := optionsKey(m)
	if shared, ok := in.options[key]; ok {
		return shared
	}
	if len(in.options) >= maxInternedOptions {
		clear(in.options)
	}
	in.options[key] = m
	return m
}

// optionsKey is m's content as one string: keys sorted, each key and
// value prefixed by its length (options may hold any UTF-8, NUL too, so
// no separator would keep two different maps from one key).
func optionsKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen32
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		v := m[k]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return string(b)
}
