package api

import (
	"errors"
	"strings"
	"testing"
)

// TestCursorResumesWithoutGapOrDuplicate replays a stream broken in the
// middle of an index and resumed after the cursor's Complete: every event
// is taken exactly once.
func TestCursorResumesWithoutGapOrDuplicate(t *testing.T) {
	ev := func(i uint64, typ EventType, name string) *Event {
		return &Event{Index: i, EventType: typ, Info: &PluginInfo{Name: name}}
	}
	stream := []*Event{
		ev(5, EventRegistered, "a"), ev(6, EventDeregistered, "b"), ev(6, EventDeregistered, "c"),
		ev(6, EventDeregistered, "d"), ev(7, EventHeartbeat, ""), ev(8, EventUpdated, "e"),
	}
	for cut := 0; cut <= len(stream); cut++ {
		var c Cursor
		var got []string
		take := func(from []*Event) {
			skip := c.Skip()
			for _, e := range from {
				if e.Index <= c.Complete && e.EventType != EventHeartbeat {
					continue // the source resumes after Complete
				}
				next, isNew, err := c.Next(e, &skip)
				if err != nil {
					t.Fatal(err)
				}
				if isNew && e.EventType != EventHeartbeat {
					got = append(got, e.Info.Name)
				}
				c = next
			}
		}
		take(stream[:cut])
		take(stream) // the resumed stream: from the start, as a node replays it
		if want := "a b c d e"; strings.Join(got, " ") != want {
			t.Errorf("cut at %d: took %q, want %q", cut, strings.Join(got, " "), want)
		}
		if c.Complete != 7 || c.Partial != 8 || c.PartialCount != 1 {
			t.Errorf("cut at %d: cursor %+v", cut, c)
		}
	}
}

func TestCursorResets(t *testing.T) {
	c := Cursor{Complete: 10, Partial: 12, PartialCount: 2}
	skip := c.Skip()
	if skip != 2 {
		t.Fatalf("skip %d, want 2", skip)
	}
	// Below the partial index: a server restarted from an older snapshot
	// (the fault suite's power cuts found this one, when the check was
	// briefly gone).
	if _, _, err := c.Next(&Event{Index: 11, EventType: EventReset}, &skip); !errors.Is(err, ErrResetBackwards) {
		t.Fatalf("reset below the partial index: %v, want ErrResetBackwards", err)
	}
	// Unless the stream itself started below the position: the cluster's
	// history ends before it.
	back := c.Resumed(5)
	skip = back.Skip()
	next5, isNew, err := back.Next(&Event{Index: 5, EventType: EventReset}, &skip)
	if err != nil || !isNew || next5 != (Cursor{Complete: 5}) || skip != 0 {
		t.Fatalf("reset of a rewound stream: %+v %v %v skip %d", next5, isNew, err, skip)
	}
	if c.Resumed(10) != c || c.Resumed(20) != c {
		t.Fatal("a stream starting at or past the position is no rewind")
	}
	skip = c.Skip()
	next, isNew, err := c.Next(&Event{Index: 20, EventType: EventReset}, &skip)
	if err != nil || !isNew || next != (Cursor{Complete: 20}) || skip != 0 {
		t.Fatalf("reset ahead: %+v %v %v skip %d", next, isNew, err, skip)
	}
}
