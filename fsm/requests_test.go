package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/plugreg/plugreg/api"
)

// A retried write (same request ID) is answered with the original result
// and index, and applies nothing, even when its content differs.
func TestRequestIDDeduplicates(t *testing.T) {
	a := newApplier(t)
	first := a.apply(&RegisterRequest{Plugin: plugin("csi", "ebs", "a1"), RequestID: "r1"})
	a.apply(dereg("csi", "ebs", "a1"))
	events := len(a.rec.events)
	before := a.fsm.State()

	cases := []struct {
		name string
		req  Request
		want ApplyResult
	}{
		{"same write again", &RegisterRequest{Plugin: plugin("csi", "ebs", "a1"), RequestID: "r1"},
			ApplyResult{Index: first.Index, Result: api.ResultRegistered, Duplicate: true}},
		{"other command, same id", &DeregisterNodeRequest{NodeID: "n1", RequestID: "r1"},
			ApplyResult{Index: first.Index, Result: api.ResultRegistered, Duplicate: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := a.apply(tc.req)
			if !reflect.DeepEqual(*got, tc.want) {
				t.Fatalf("got %+v, want %+v", *got, tc.want)
			}
			if len(a.rec.events) != events {
				t.Fatal("a duplicate emitted events")
			}
			if a.fsm.State().Len() != before.Len() || a.fsm.State().Instance("csi", "ebs", "a1") != nil {
				t.Fatal("a duplicate changed the state")
			}
		})
	}
	dr := a.apply(&DeregisterNodeRequest{NodeID: "n1", RequestID: "r2"})
	again := a.apply(&DeregisterNodeRequest{NodeID: "n1", RequestID: "r2"})
	if again.Index != dr.Index || again.Result != api.ResultAbsent || !again.Duplicate {
		t.Fatalf("deregister-node retry: %+v", again)
	}
}

// The window is bounded and evicts in log order, identically on every
// node; it survives snapshot and restore.
func TestRequestWindow(t *testing.T) {
	a := newApplier(t)
	for i := 0; i < RequestWindow+10; i++ {
		a.apply(&DeregisterNodeRequest{NodeID: "n", RequestID: fmt.Sprintf("r%d", i)})
	}
	s := a.fsm.State()
	if s.requests.len() != RequestWindow {
		t.Fatalf("window holds %d, want %d", s.requests.len(), RequestWindow)
	}
	if _, ok := s.Request("r9"); ok {
		t.Fatal("r9 should have been evicted")
	}
	if rec, ok := s.Request("r10"); !ok || rec.Index != 11 {
		t.Fatalf("r10 = %+v, %v", rec, ok)
	}
	snap := a.snapshot()
	restored, err := ReadState(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	if rec, ok := restored.Request(fmt.Sprintf("r%d", RequestWindow+9)); !ok || rec.Index != RequestWindow+10 {
		t.Fatalf("restored window lost the newest record: %+v %v", rec, ok)
	}
	var again bytes.Buffer
	WriteState(&again, restored)
	if !bytes.Equal(again.Bytes(), snap) {
		t.Fatal("window does not round-trip byte-identically")
	}
}

// An ID added again moves to its new index: the window keeps one record
// for it, so it walks in log order and a snapshot of it reads back, and a
// State that shared the window before keeps its view. A restore is what
// adds an ID again (it records its own ID in the backup's window, which
// may hold it already).
func TestRequestWindowMovesAnIDAddedAgain(t *testing.T) {
	s := NewState()
	s.requests.add(RequestRecord{ID: "a", Index: 5, Result: api.ResultRegistered})
	s.requests.add(RequestRecord{ID: "b", Index: 6, Result: api.ResultRegistered})
	before := *s
	s.requests.add(RequestRecord{ID: "a", Index: 9, Result: api.ResultRestored})
	s.index = 9
	walk := func(s *State) string {
		var got []string
		s.requests.walk(func(rec RequestRecord) bool {
			got = append(got, fmt.Sprintf("%s@%d", rec.ID, rec.Index))
			return true
		})
		return fmt.Sprint(got)
	}
	if got := walk(s); got != "[b@6 a@9]" {
		t.Fatalf("window walks %v, want [b@6 a@9]", got)
	}
	if got := walk(&before); got != "[a@5 b@6]" {
		t.Fatalf("the earlier State's window walks %v, want [a@5 b@6]", got)
	}
	var buf bytes.Buffer
	if err := WriteState(&buf, s); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if _, err := ReadState(&buf); err != nil {
		t.Fatalf("read back: %v", err)
	}
}

// Every published State keeps the window it was published with while
// later batches append to and evict from the shared log: views never
// change, whatever the batch sizes.
func TestRequestWindowViewsStayAsPublished(t *testing.T) {
	a := newApplier(t)
	type view struct {
		s     *State
		first string
		n     int
	}
	var views []view
	for i := 0; i < RequestWindow+3000; i++ {
		a.apply(&DeregisterNodeRequest{NodeID: "n", RequestID: fmt.Sprintf("r%d", i)})
		if i%997 == 0 || i >= RequestWindow-2 && i < RequestWindow+2 {
			s := a.fsm.State()
			views = append(views, view{s: s, first: s.requests.log[0].ID, n: s.requests.len()})
		}
	}
	for _, v := range views {
		want := min(int(v.s.Index()), RequestWindow)
		if v.n != want || v.s.requests.len() != want || v.s.requests.log[0].ID != v.first {
			t.Fatalf("state at %d: window of %d starting %s, published with %d starting %s", v.s.Index(), v.s.requests.len(), v.s.requests.log[0].ID, v.n, v.first)
		}
		last := v.s.requests.log[v.s.requests.len()-1]
		if last.Index != v.s.Index() || last.ID != fmt.Sprintf("r%d", v.s.Index()-1) {
			t.Fatalf("state at %d: window ends with %+v", v.s.Index(), last)
		}
	}
}
