package check

import "sort"

// ReadsAtIndex checks every successful linearizable read against the
// ground truth at the index the read reported: the result must equal the
// model's state there, and the index must be at least that of every write
// acknowledged before the read began. Stale reads are checked only for the
// first property (they may be old, never wrong).
func ReadsAtIndex(ops []Op, t *Truth) []Violation {
	var vs []Violation
	var reads []Op
	var writes []Op
	for _, op := range ops {
		switch {
		case (op.F == FList || op.F == FGet) && op.Outcome == OK:
			reads = append(reads, op)
		case op.IsWrite() && op.Outcome == OK:
			writes = append(writes, op)
		}
	}
	// Index floor: the highest index acknowledged before each read began.
	sort.Slice(writes, func(i, j int) bool { return writes[i].End < writes[j].End })
	prefixMax := make([]uint64, len(writes)) // highest index among writes[:i+1]
	for i, w := range writes {
		prefixMax[i] = w.Index
		if i > 0 {
			prefixMax[i] = max(prefixMax[i], prefixMax[i-1])
		}
	}
	floorAt := func(start int64) uint64 {
		n := sort.Search(len(writes), func(i int) bool { return writes[i].End >= start })
		if n == 0 {
			return 0
		}
		return prefixMax[n-1]
	}
	sort.Slice(reads, func(i, j int) bool { return reads[i].Index < reads[j].Index })
	model := NewRegistry()
	next := 0 // next ground-truth entry to apply
	for _, r := range reads {
		for next < len(t.Entries) && t.Entries[next].Index <= r.Index {
			e := &t.Entries[next]
			if e.Kind == "command" && e.Error == "" && !e.Duplicate {
				model.Apply(e.Index, e.Command, e.Request)
			}
			next++
		}
		if r.Index > t.LastIndex() {
			vs = append(vs, violation("reads", "op %d (%s on %s) reports index %d past the log's last, %d", r.ID, r.F, r.Node, r.Index, t.LastIndex()))
			continue
		}
		switch r.F {
		case FList:
			if want, got := renderItems(model.List(r.Type)), renderItems(r.List); want != got {
				vs = append(vs, violation("reads", "op %d: list %s on %s at %d returned [%s]; the log at %d says [%s]", r.ID, r.Type, r.Node, r.Index, got, r.Index, want))
			}
		case FGet:
			v, ok := model.Get(r.Type, r.Name, r.Alloc)
			if ok != r.Found || v != r.Got {
				vs = append(vs, violation("reads", "op %d: get %s/%s/%s on %s at %d returned (%q, %v); the log says (%q, %v)", r.ID, r.Type, r.Name, r.Alloc, r.Node, r.Index, r.Got, r.Found, v, ok))
			}
		}
		if !r.Stale {
			if f := floorAt(r.Start); r.Index < f {
				vs = append(vs, violation("reads", "op %d: stale linearizable %s on %s: index %d, but a write was acknowledged at %d before it began", r.ID, r.F, r.Node, r.Index, f))
			}
		}
	}
	return vs
}
