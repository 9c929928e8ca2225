package check

import (
	"sort"
	"strings"
)

// Entry is one log entry as the merged apply journals know it.
type Entry struct {
	ApplyRecord
	Nodes []string // the nodes that journaled it
}

// Truth is the ground truth of a run: the applied log, merged from every
// node's apply journal, and the model replayed over it.
type Truth struct {
	Entries  []Entry                 // by index, commands and configuration
	byIndex  map[uint64]*Entry       //
	Events   []ModelEvent            // every event, in log order
	Restores map[string][]uint64     // node -> indexes at which a snapshot replaced its state
	results  map[uint64]string       // model result per command index
	evAt     map[uint64][]ModelEvent //
}

// Merge builds the ground truth from each node's journal and reports every
// index at which two records disagree (a safety violation of Raft).
func Merge(journals map[string][]ApplyRecord) (*Truth, []Violation) {
	var vs []Violation
	t := &Truth{byIndex: map[uint64]*Entry{}, Restores: map[string][]uint64{}, results: map[uint64]string{}, evAt: map[uint64][]ModelEvent{}}
	nodes := make([]string, 0, len(journals))
	for n := range journals {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, node := range nodes {
		for _, rec := range journals[node] {
			if rec.Kind == "restore" {
				t.Restores[node] = append(t.Restores[node], rec.Index)
				continue
			}
			e, ok := t.byIndex[rec.Index]
			if !ok {
				t.byIndex[rec.Index] = &Entry{ApplyRecord: rec, Nodes: []string{node}}
				continue
			}
			if !sameRecord(&e.ApplyRecord, &rec) {
				vs = append(vs, violation("ground-truth", "index %d: %v says %s %s %s (term %d), %s says %s %s %s (term %d)",
					rec.Index, e.Nodes, e.Command, e.RequestID, e.Result, e.Term, node, rec.Command, rec.RequestID, rec.Result, rec.Term))
				continue
			}
			if !contains(e.Nodes, node) {
				e.Nodes = append(e.Nodes, node)
			}
		}
	}
	idx := make([]uint64, 0, len(t.byIndex))
	for i := range t.byIndex {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	model := NewRegistry()
	for _, i := range idx {
		e := t.byIndex[i]
		t.Entries = append(t.Entries, *e)
		if e.Kind != "command" || e.Error != "" || e.Duplicate || IsACLCommand(e.Command) {
			continue
		}
		res, evs := model.Apply(i, e.Command, e.Request)
		t.results[i] = res
		if res != e.Result {
			vs = append(vs, violation("ground-truth", "index %d: the FSM answered %q where the model says %q", i, e.Result, res))
		}
		t.Events = append(t.Events, evs...)
		t.evAt[i] = evs
	}
	for i := range t.Entries {
		t.byIndex[t.Entries[i].Index] = &t.Entries[i]
	}
	return t, vs
}

// IsACLCommand reports whether a journaled command manages ACL tokens (a
// -secure run's bootstrap and agent token): it changes no plugin, so the
// registry model skips it; Merge still checks that every node applied it
// alike.
func IsACLCommand(command string) bool { return strings.HasPrefix(command, "acl-") }

func sameRecord(a, b *ApplyRecord) bool {
	return a.Term == b.Term && a.Kind == b.Kind && a.RequestID == b.RequestID && a.Command == b.Command &&
		string(a.Request) == string(b.Request) && a.Result == b.Result && a.Duplicate == b.Duplicate && a.Removed == b.Removed
}

// StateAt replays the model up to and including index.
func (t *Truth) StateAt(index uint64) *Registry {
	r := NewRegistry()
	for i := range t.Entries {
		e := &t.Entries[i]
		if e.Index > index {
			break
		}
		if e.Kind == "command" && e.Error == "" && !e.Duplicate && !IsACLCommand(e.Command) {
			r.Apply(e.Index, e.Command, e.Request)
		}
	}
	return r
}

// LastIndex is the highest index in the ground truth.
func (t *Truth) LastIndex() uint64 {
	if len(t.Entries) == 0 {
		return 0
	}
	return t.Entries[len(t.Entries)-1].Index
}

// Entry returns the entry at index, or nil.
func (t *Truth) Entry(index uint64) *Entry { return t.byIndex[index] }
