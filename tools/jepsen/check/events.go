package check

import "fmt"

func renderEvent(e *EventRec) string {
	if e.Info == nil {
		return fmt.Sprintf("%d %s", e.Index, e.EventType)
	}
	cur := "-"
	if e.Current != nil {
		cur = e.Current.Alloc + "=" + e.Current.Value
	}
	return fmt.Sprintf("%d %s %s/%s/%s=%s cur=%s", e.Index, e.EventType, e.Info.Type, e.Info.Name, e.Info.Alloc, e.Info.Value, cur)
}

// Events checks every subscriber session against the ground truth:
//   - filtered: only the session's types;
//   - ordered and atomic: indexes never decrease; an index's events come
//     together and whole;
//   - reliable: from the session's resume index on, the events are exactly
//     the ground truth's (no gap, duplicate, reorder or phantom), and the
//     first event after the resume index is the right one, whichever node
//     serves it;
//   - heartbeats never run ahead: every event at or below a heartbeat's
//     index was delivered before it;
//   - resets carry exactly the ground truth's state at their index and
//     happen only where the node's journal (journalSize events) was
//     outrun or replaced by a snapshot.
func Events(sessions []Session, t *Truth, journalSize int) []Violation {
	var vs []Violation
	for si := range sessions {
		if v := checkSession(&sessions[si], t, journalSize); v != nil {
			vs = append(vs, *v)
		}
	}
	return append(vs, joined(sessions)...)
}

// joined checks that each subscriber's sessions join into one stream: a
// session resumes no later than the highest index its predecessor had
// reached (so nothing between them is skipped).
func joined(sessions []Session) []Violation {
	var vs []Violation
	last := map[int]*Session{}
	for i := range sessions {
		s := &sessions[i]
		if prev, ok := last[s.Subscriber]; ok {
			reached := prev.From
			for _, e := range prev.Events {
				reached = max(reached, e.Index)
			}
			if s.From > reached {
				vs = append(vs, violation("events", "subscriber %d: session %d resumes from %d, but session %d only reached %d", s.Subscriber, s.Seq, s.From, prev.Seq, reached))
			}
		}
		last[s.Subscriber] = s
	}
	return vs
}

func checkSession(s *Session, t *Truth, journalSize int) *Violation {
	name := fmt.Sprintf("subscriber %d session %d on %s from %d", s.Subscriber, s.Seq, s.Node, s.From)
	fail := func(format string, args ...interface{}) *Violation {
		v := violation("events", name+": "+format, args...)
		return &v
	}
	var expected []ModelEvent
	for _, e := range t.Events {
		if len(s.Types) == 0 || contains(s.Types, e.Info.Type) {
			expected = append(expected, e)
		}
	}
	seek := func(after uint64) int {
		for i, e := range expected {
			if e.Index > after {
				return i
			}
		}
		return len(expected)
	}
	pos := seek(s.From)
	var last, hb uint64 = s.From, 0
	for i := range s.Events {
		ev := &s.Events[i]
		switch ev.EventType {
		case "heartbeat":
			if ev.Index < last {
				return fail("heartbeat at %d after an event at %d", ev.Index, last)
			}
			if pos < len(expected) && expected[pos].Index <= ev.Index {
				return fail("heartbeat at %d, but the event %s was never delivered", ev.Index, expected[pos])
			}
			hb = max(hb, ev.Index)
			continue
		case "reset":
			if ev.Index < last {
				return fail("reset at %d after %d: the index went back", ev.Index, last)
			}
			if want, got := renderPlugins(t.StateAt(ev.Index).All(s.Types)), renderPlugins(ev.Plugins); want != got {
				return fail("reset at %d carries [%s]; the log's state there is [%s]", ev.Index, got, want)
			}
			if !resetAllowed(s, t, ev.Index, journalSize) {
				return fail("reset at %d although the journal still held every event after %d and %s restored no snapshot", ev.Index, s.From, s.Node)
			}
			last, pos = ev.Index, seek(ev.Index)
			continue
		}
		if ev.Info == nil {
			return fail("event %d without Info", ev.Index)
		}
		if len(s.Types) > 0 && !contains(s.Types, ev.Info.Type) {
			return fail("event %s outside the filter %v", renderEvent(ev), s.Types)
		}
		if ev.Index < last || ev.Index <= hb {
			return fail("event %s after index %d (heartbeat %d): out of order or duplicated", renderEvent(ev), last, hb)
		}
		if pos >= len(expected) {
			return fail("event %s is not in the log", renderEvent(ev))
		}
		if want := expected[pos].String(); want != renderEvent(ev) {
			return fail("got %s, the log says the next event is %s", renderEvent(ev), want)
		}
		last = ev.Index
		pos++
	}
	return nil
}

// resetAllowed: the node had to reset the session if more events than its
// journal holds followed the resume index, or it restored a snapshot past
// the resume index.
func resetAllowed(s *Session, t *Truth, at uint64, journalSize int) bool {
	n := 0
	for _, e := range t.Events {
		if e.Index > s.From && e.Index <= at {
			n++
		}
	}
	if n >= journalSize {
		return true
	}
	for _, r := range t.Restores[s.Node] {
		if r > s.From {
			return true
		}
	}
	return false
}

// Leaders checks that no two nodes were seen leading in the same term.
func Leaders(obs []LeaderObs) []Violation {
	byTerm := map[uint64]string{}
	var vs []Violation
	for _, o := range obs {
		if o.State != "Leader" {
			continue
		}
		if prev, ok := byTerm[o.Term]; ok && prev != o.Node {
			vs = append(vs, violation("leaders", "term %d has two leaders: %s and %s", o.Term, prev, o.Node))
			continue
		}
		byTerm[o.Term] = o.Node
	}
	return vs
}
