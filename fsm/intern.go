package fsm

import (
	"encoding/binary"
	"slices"
	"strings"

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
// registered, so the snapshot bytes and every node's state are those of
// a replica that does not intern.

// maxInternedOptions bounds the option sets kept for sharing. A fleet has
// a few distinct ones; a registry whose every instance has its own options
// gains nothing, and the table is then emptied whenever it fills rather
// than grow with the registry.
const maxInternedOptions = 4096

// maxStrings bounds the strings the interner keeps, emptied when it
// fills like the option sets: a fleet has few distinct types, versions and
// node IDs, and names in the thousands.
const maxStrings = 16384

// interner is owned by the FSM's apply goroutine (and by ReadState while
// it builds a state): States carry a pointer to it, readers never use it.
type interner struct {
	options map[string]map[string]string
	// strings maps a string to its one copy. Not unique.Make(s).Value(),
	// which shares a copy only while a unique.Handle to it lives: the
	// state keeps the string, not the handle, so after the next GC the
	// table would forget it and the next equal string get a copy of its
	// own; it also costs about 4 % of a server's CPU under register load
	// (a concurrent table, a weak pointer made strong on every hit).
	strings map[string]string
}

func newInterner() *interner {
	return &interner{options: map[string]map[string]string{}, strings: map[string]string{}}
}

// internStrings makes p's repeated strings share one copy per value.
func (in *interner) internStrings(p *api.PluginInfo) {
	p.Type = in.str(p.Type)
	p.Name = in.str(p.Name)
	if p.Version != "" {
		p.Version = in.str(p.Version)
	}
	if p.NodeID != "" {
		p.NodeID = in.str(p.NodeID)
	}
}

func (in *interner) str(s string) string {
	if c, ok := in.strings[s]; ok {
		return c
	}
	if len(in.strings) >= maxStrings {
		clear(in.strings)
	}
	// A copy of its own, as unique.Make made: s may share its bytes with
	// the whole decoded entry, which the table must not keep alive.
	c := strings.Clone(s)
	in.strings[c] = c
	return c
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
