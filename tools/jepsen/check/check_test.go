package check

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// journal builds a node's apply journal from commands, one per index
// starting at 1: "reg t n a v", "dereg t n a", "node N", and "cdereg t n a
// N" (conditional on node h1's N, as agents write).
func journal(t *testing.T, cmds ...string) []ApplyRecord {
	t.Helper()
	var out []ApplyRecord
	model := NewRegistry()
	for i, c := range cmds {
		f := strings.Fields(c)
		idx := uint64(i + 1)
		rec := ApplyRecord{Index: idx, Term: 1, Kind: "command", RequestID: fmt.Sprintf("r%d", idx)}
		var req interface{}
		switch f[0] {
		case "reg":
			rec.Command = "register"
			req = map[string]interface{}{"Plugin": map[string]interface{}{"Type": f[1], "Name": f[2], "AllocID": f[3], "Version": f[4], "NodeID": "h1",
				"ConnectionInfo": map[string]string{"SocketPath": "/s"}}}
		case "dereg":
			rec.Command = "deregister"
			req = map[string]string{"Type": f[1], "Name": f[2], "AllocID": f[3]}
		case "creg": // a node-bound token's: "creg t n a v NODE", on NODE's condition
			rec.Command = "conditional-register"
			req = map[string]interface{}{"Plugin": map[string]interface{}{"Type": f[1], "Name": f[2], "AllocID": f[3], "Version": f[4], "NodeID": f[5],
				"ConnectionInfo": map[string]string{"SocketPath": "/s"}}, "IfNodeID": f[5]}
		case "cdereg":
			rec.Command = "conditional-deregister"
			req = map[string]string{"Type": f[1], "Name": f[2], "AllocID": f[3], "IfNodeID": f[4]}
		case "node":
			rec.Command = "deregister-node"
			req = map[string]string{"NodeID": f[1]}
		case "nodehealth":
			rec.Command = "node-health"
			req = map[string]interface{}{"NodeID": f[1], "Suspect": f[2] == "suspect"}
		case "lreg": // leased: "lreg t n a v TTL"
			rec.Command = "register"
			req = map[string]interface{}{"Plugin": map[string]interface{}{"Type": f[1], "Name": f[2], "AllocID": f[3], "Version": f[4], "NodeID": "h1",
				"ConnectionInfo": map[string]string{"SocketPath": "/s"}, "TTL": f[5]}}
		case "expire": // the leader's: "expire t n a MODIFY", no request ID
			rec.Command, rec.RequestID = "expire", ""
			m, _ := strconv.ParseUint(f[4], 10, 64)
			req = map[string]interface{}{"Leases": []map[string]interface{}{{"Type": f[1], "Name": f[2], "AllocID": f[3], "ModifyIndex": m}}}
		}
		rec.Request, _ = json.Marshal(req)
		rec.Result, _ = model.Apply(idx, rec.Command, rec.Request)
		out = append(out, rec)
	}
	return out
}

func truth(t *testing.T, cmds ...string) *Truth {
	t.Helper()
	tr, vs := Merge(map[string][]ApplyRecord{"n1": journal(t, cmds...), "n2": journal(t, cmds...)})
	if len(vs) > 0 {
		t.Fatalf("consistent journals flagged: %v", vs)
	}
	return tr
}

var baseLog = []string{"reg t x a1 v1", "reg t x a2 v2", "dereg t x a2", "reg t y a1 v3"}

// writeOps are the acknowledged writes matching baseLog.
func writeOps() []Op {
	return []Op{
		{ID: 1, Process: 0, F: FRegister, Type: "t", Name: "x", Alloc: "a1", Value: "v1", RequestID: "r1", Outcome: OK, Result: "registered", Index: 1, Start: 0, End: 10},
		{ID: 2, Process: 1, F: FRegister, Type: "t", Name: "x", Alloc: "a2", Value: "v2", RequestID: "r2", Outcome: OK, Result: "registered", Index: 2, Start: 20, End: 30},
		{ID: 3, Process: 0, F: FDeregister, Type: "t", Name: "x", Alloc: "a2", RequestID: "r3", Outcome: OK, Result: "deregistered", Index: 3, Start: 40, End: 50},
		{ID: 4, Process: 1, F: FRegister, Type: "t", Name: "y", Alloc: "a1", Value: "v3", RequestID: "r4", Outcome: OK, Result: "registered", Index: 4, Start: 60, End: 70},
	}
}

func expectFlagged(t *testing.T, what string, vs []Violation, want string) {
	t.Helper()
	for _, v := range vs {
		if strings.Contains(v.String(), want) {
			return
		}
	}
	t.Fatalf("%s: not flagged (want %q), got %v", what, want, vs)
}

func expectClean(t *testing.T, what string, vs []Violation) {
	t.Helper()
	if len(vs) > 0 {
		t.Fatalf("%s: a correct history was flagged: %v", what, vs)
	}
}

func TestGroundTruthDisagreement(t *testing.T) {
	a := journal(t, baseLog...)
	b := journal(t, baseLog...)
	b[2] = journal(t, "reg t x a1 v1", "reg t x a2 v2", "reg t z a9 v9")[2]
	_, vs := Merge(map[string][]ApplyRecord{"n1": a, "n2": b})
	expectFlagged(t, "disagreeing journals", vs, "index 3")
}

func TestWritesChecker(t *testing.T) {
	tr := truth(t, baseLog...)
	expectClean(t, "correct writes", Writes(writeOps(), tr))

	lost := append(writeOps(), Op{ID: 5, F: FRegister, Type: "t", Name: "z", Alloc: "a", Value: "v9", RequestID: "r9", Outcome: OK, Result: "registered", Index: 5})
	expectFlagged(t, "lost write", Writes(lost, tr), "lost")

	phantom := writeOps()[:3] // r4 is in the log but nobody issued it
	expectFlagged(t, "phantom write", Writes(phantom, tr), "phantom")

	failed := writeOps()
	failed[3].Outcome = Fail
	expectFlagged(t, "applied after a definite failure", Writes(failed, tr), "failed definitely")

	recs := journal(t, baseLog...)
	dup := recs[3]
	dup.Index, dup.RequestID = 5, "r2"
	tr2, _ := Merge(map[string][]ApplyRecord{"n1": append(recs, dup)})
	expectFlagged(t, "duplicated write", Writes(writeOps(), tr2), "duplicated")

	unknown := writeOps()
	unknown[3].Outcome = Unknown
	expectClean(t, "unknown write that applied", Writes(unknown, tr))
}

// An agent registers and deregisters its stub plugins with no request ID:
// exempt for type StubPluginType only.
func TestWritesStubPluginsExempt(t *testing.T) {
	agentWrites := func(cmds ...string) *Truth {
		recs := journal(t, append(append([]string(nil), baseLog...), cmds...)...)
		for i := len(baseLog); i < len(recs); i++ {
			recs[i].RequestID = ""
		}
		tr, vs := Merge(map[string][]ApplyRecord{"n1": recs})
		expectClean(t, "journal", vs)
		return tr
	}
	stub := agentWrites("reg jplugin p-c1 a1 v", "cdereg jplugin p-c1 a1 h1")
	expectClean(t, "the agent's writes of a jplugin", Writes(writeOps(), stub))
	other := agentWrites("reg t z a9 v9")
	expectFlagged(t, "a write without request ID of another type", Writes(writeOps(), other), "phantom")
	otherDereg := agentWrites("cdereg t y a1 h1")
	expectFlagged(t, "a conditional deregister without request ID of another type", Writes(writeOps(), otherDereg), "phantom")
	leader := agentWrites("nodehealth h1 suspect", "nodehealth h1 alive")
	expectClean(t, "the leader's node-health marks", Writes(writeOps(), leader))
}

// The model applies agents' conditional deregisters as the FSM does: a
// removal when the condition holds, a refusal (no event) when not.
func TestModelConditionalDeregister(t *testing.T) {
	tr := truth(t, "reg t x a1 v1", "cdereg t x a1 h2", "cdereg t x a1 h1")
	if got := tr.Entry(2).Result; got != "conflict" {
		t.Errorf("condition on another node: model says %q, want conflict", got)
	}
	if got := tr.Entry(3).Result; got != "deregistered" {
		t.Errorf("condition holding: model says %q, want deregistered", got)
	}
	if n := len(tr.Events); n != 2 {
		t.Errorf("got %d events, want 2 (registered, deregistered): %v", n, tr.Events)
	}
}

func TestModelConditionalRegister(t *testing.T) {
	tr := truth(t, "reg t x a1 v1", "creg t x a1 v2 h2", "creg t x a1 v3 h1", "creg t x a2 v4 h2")
	for i, want := range []string{"registered", "conflict", "updated", "registered"} {
		if got := tr.Entry(uint64(i + 1)).Result; got != want {
			t.Errorf("entry %d: model says %q, want %q", i+1, got, want)
		}
	}
	if n := len(tr.Events); n != 3 {
		t.Errorf("got %d events, want 3 (registered, updated, registered): %v", n, tr.Events)
	}
}

func TestReadsChecker(t *testing.T) {
	tr := truth(t, baseLog...)
	good := append(writeOps(),
		Op{ID: 10, Process: 2, F: FList, Type: "t", Outcome: OK, Index: 4, Start: 80, End: 90, List: []Item{{"x", "a1", "v1"}, {"y", "a1", "v3"}}},
		Op{ID: 11, Process: 2, F: FGet, Type: "t", Name: "x", Alloc: "a2", Outcome: OK, Index: 3, Start: 55, End: 58, Found: false},
	)
	expectClean(t, "correct reads", ReadsAtIndex(good, tr))

	wrong := append(writeOps(), Op{ID: 10, F: FList, Type: "t", Outcome: OK, Index: 4, Start: 80, End: 90, List: []Item{{"x", "a2", "v2"}}})
	expectFlagged(t, "read that does not match its index", ReadsAtIndex(wrong, tr), "returned")

	stale := append(writeOps(), Op{ID: 10, F: FList, Type: "t", Outcome: OK, Index: 2, Start: 80, End: 90, List: []Item{{"x", "a2", "v2"}}})
	expectFlagged(t, "stale read", ReadsAtIndex(stale, tr), "stale linearizable")
	stale[4].Stale = true
	expectClean(t, "a stale read asked for as stale", ReadsAtIndex(stale, tr))
}

func TestLinearizableChecker(t *testing.T) {
	ok := append(writeOps(), Op{ID: 10, Process: 2, F: FList, Type: "t", Outcome: OK, Index: 4, Start: 80, End: 90, List: []Item{{"x", "a1", "v1"}, {"y", "a1", "v3"}}})
	expectClean(t, "linearizable history", Linearizable(ok, 10*time.Second, nil, nil))

	// A read after the deregister completed still sees a2: not linearizable.
	staleRead := append(writeOps(), Op{ID: 10, Process: 2, F: FGet, Type: "t", Name: "x", Alloc: "a2", Outcome: OK, Found: true, Got: "v2", Start: 52, End: 54})
	expectFlagged(t, "stale read", Linearizable(staleRead, 10*time.Second, nil, nil), "not linearizable")

	// An unknown write may or may not have happened: both reads are fine.
	unk := writeOps()
	unk[3].Outcome = Unknown
	for _, found := range []bool{false, true} {
		h := append(append([]Op{}, unk...), Op{ID: 10, Process: 2, F: FGet, Type: "t", Name: "y", Alloc: "a1", Outcome: OK, Found: found, Got: map[bool]string{true: "v3"}[found], Start: 100, End: 110})
		expectClean(t, fmt.Sprintf("unknown write, read found=%v", found), Linearizable(h, 10*time.Second, nil, nil))
	}
	// But an acknowledged write with the wrong result is caught.
	bad := writeOps()
	bad[1].Result = "updated"
	expectFlagged(t, "wrong write result", Linearizable(bad, 10*time.Second, nil, nil), "not linearizable")
}

func session(from uint64, evs ...EventRec) Session {
	return Session{Subscriber: 1, Seq: 1, Node: "n1", From: from, Events: evs}
}

func ev(idx uint64, typ, name, alloc, val, cur string) EventRec {
	e := EventRec{Index: idx, EventType: typ, Info: &Plugin{Type: "t", Name: name, Alloc: alloc, Value: val}}
	if cur != "" {
		a, v, _ := strings.Cut(cur, "=")
		e.Current = &Plugin{Type: "t", Name: name, Alloc: a, Value: v}
	}
	return e
}

func TestEventsChecker(t *testing.T) {
	tr := truth(t, baseLog...)
	e1 := ev(1, "registered", "x", "a1", "v1", "a1=v1")
	e2 := ev(2, "registered", "x", "a2", "v2", "a2=v2")
	e3 := ev(3, "deregistered", "x", "a2", "v2", "a1=v1")
	e4 := ev(4, "registered", "y", "a1", "v3", "a1=v3")
	hb := func(i uint64) EventRec { return EventRec{Index: i, EventType: "heartbeat"} }
	reset := EventRec{Index: 3, EventType: "reset", Plugins: []Plugin{{Type: "t", Name: "x", Alloc: "a1", Value: "v1", ModifyIndex: 1}}}

	cases := []struct {
		name string
		s    Session
		size int
		want string // "" = clean
	}{
		{"complete stream", session(0, e1, e2, hb(2), e3, e4, hb(4)), 100, ""},
		{"resumed stream", session(2, e3, e4), 100, ""},
		{"gap", session(0, e1, e3, e4), 100, "next event"},
		{"duplicate", session(0, e1, e2, e2, e3), 100, "the log says the next event is 3"},
		{"reordered", session(0, e2, e1), 100, "next event"},
		{"resume starts late", session(1, e3, e4), 100, "next event"},
		{"phantom", session(4, e4), 100, "not in the log"},
		{"heartbeat ahead", session(0, e1, hb(3), e4), 100, "never delivered"},
		{"event at a heartbeat's index", session(0, e1, e2, e3, hb(3), e3), 100, "out of order"},
		{"wrong current", session(2, ev(3, "deregistered", "x", "a2", "v2", "")), 100, "next event"},
		{"legitimate reset", session(0, reset, e4), 2, ""},
		{"reset with wrong state", session(0, EventRec{Index: 3, EventType: "reset"}, e4), 2, "carries"},
		{"reset without cause", session(0, reset, e4), 100, "although the journal"},
		{"reset going back", session(0, e1, e2, e3, e4, reset), 2, "went back"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vs := Events([]Session{tc.s}, tr, tc.size)
			if tc.want == "" {
				expectClean(t, tc.name, vs)
			} else {
				expectFlagged(t, tc.name, vs, tc.want)
			}
		})
	}
	// A restore on the node past the resume index justifies a reset.
	tr.Restores["n1"] = []uint64{3}
	expectClean(t, "reset after a snapshot restore", Events([]Session{session(0, reset, e4)}, tr, 100))
}

func TestLeadersChecker(t *testing.T) {
	expectClean(t, "one leader per term", Leaders([]LeaderObs{{"n1", 1, "Leader", 0}, {"n2", 2, "Leader", 1}, {"n1", 2, "Follower", 2}}))
	expectFlagged(t, "two leaders in a term", Leaders([]LeaderObs{{"n1", 2, "Leader", 0}, {"n2", 2, "Leader", 1}}), "two leaders")
}

func TestJoinedSessions(t *testing.T) {
	tr := truth(t, baseLog...)
	e1 := ev(1, "registered", "x", "a1", "v1", "a1=v1")
	e2 := ev(2, "registered", "x", "a2", "v2", "a2=v2")
	e4 := ev(4, "registered", "y", "a1", "v3", "a1=v3")
	a := session(0, e1, e2)
	b := session(1, ev(2, "registered", "x", "a2", "v2", "a2=v2"), ev(3, "deregistered", "x", "a2", "v2", "a1=v1"), e4)
	b.Seq = 2
	expectClean(t, "resume from a complete index", Events([]Session{a, b}, tr, 100))
	skip := session(3, e4)
	skip.Seq = 2
	expectFlagged(t, "resume past what was reached", Events([]Session{a, skip}, tr, 100), "only reached 2")
}

// A -secure run's ACL setup (bootstrap, the agent token) is in the log
// without a request ID: it is neither a phantom write nor a registry
// command the model must agree with; nodes must still agree on it.
func TestACLCommandsExempt(t *testing.T) {
	recs := journal(t, baseLog...)
	acl := ApplyRecord{Index: uint64(len(recs) + 1), Term: recs[len(recs)-1].Term, Kind: "command", Command: "acl-bootstrap", Result: "created"}
	tr, vs := Merge(map[string][]ApplyRecord{"n1": append(append([]ApplyRecord(nil), recs...), acl), "n2": append(append([]ApplyRecord(nil), recs...), acl)})
	expectClean(t, "journals with an ACL command", vs)
	expectClean(t, "writes around an ACL command", Writes(writeOps(), tr))
	other := acl
	other.Result = "absent"
	_, vs = Merge(map[string][]ApplyRecord{"n1": append(append([]ApplyRecord(nil), recs...), acl), "n2": append(append([]ApplyRecord(nil), recs...), other)})
	expectFlagged(t, "nodes disagreeing on an ACL command", vs, "index 5")
}

// The model expires an instance only while it is the leased registration
// the expiry names; the leader's expiries need no issuer.
func TestModelExpire(t *testing.T) {
	tr := truth(t, "lreg jlease l0 g0 v0 3s", "reg jlease l0 g1 v1", "expire jlease l0 g1 2", "expire jlease l0 g0 9", "expire jlease l0 g0 1", "expire jlease l0 g0 1")
	want := []string{"register", "register", "absent", "absent", "expired", "absent"}
	for i, w := range want {
		if got := tr.results[uint64(i+1)]; got != w && !(w == "register" && got == "registered") {
			t.Errorf("index %d: model result %q, want %q", i+1, got, w)
		}
	}
	if n := len(tr.evAt[5]); n != 1 || tr.evAt[5][0].EventType != "expired" || tr.evAt[5][0].Info.Alloc != "g0" {
		t.Fatalf("index 5's events: %v; want g0 expired", tr.evAt[5])
	}
	if _, ok := tr.StateAt(6).Get("jlease", "l0", "g0"); ok {
		t.Fatal("g0 still registered after its expiry")
	}
	if _, ok := tr.StateAt(6).Get("jlease", "l0", "g1"); !ok {
		t.Fatal("g1, registered without a TTL, was expired")
	}
	issued := []Op{{F: FRegister, RequestID: "r1", Outcome: Unknown}, {F: FRegister, RequestID: "r2", Outcome: Unknown}}
	if vs := Writes(issued, tr); len(vs) != 0 {
		t.Fatalf("the leader's expiries counted as phantoms: %v", vs)
	}
}

// The lease checker: an expiry seen before the deadline an acknowledged
// registration or renewal set, a renewal acknowledged after the expiry
// was seen, and a lease left at the end are violations; failed renewals
// set no deadline.
func TestLeasesChecker(t *testing.T) {
	s := func(x float64) int64 { return int64(x * 1e9) }
	expiredLog := []string{"lreg jlease l0 g0 v0 3s", "expire jlease l0 g0 1"}
	renewal := func(at float64, outcome string) Op {
		return Op{F: FRenew, Type: LeaseType, Name: "l0", Alloc: "g0", Outcome: outcome, Start: s(at), End: s(at + 0.05), Node: "n1"}
	}
	cases := []struct {
		name     string
		log      []string
		renewals []Op
		seenAt   float64 // 0: no subscriber saw the expiry
		reqID    string
		final    uint64
		want     string // a violation containing this; "" none
	}{
		{"expired after the deadline", expiredLog, []Op{renewal(1, OK), renewal(2, OK)}, 5.2, "r1", 2, ""},
		{"expired before the deadline", expiredLog, []Op{renewal(1, OK), renewal(2, OK)}, 4.5, "r1", 2, "before its deadline: a renewal sent at 2.000s"},
		{"expired before the registration's deadline", expiredLog, nil, 2.5, "r1", 2, "before its deadline: a registration sent at 0.000s"},
		{"a failed renewal sets no deadline", expiredLog, []Op{renewal(1, OK), renewal(2, Fail), renewal(3, Unknown)}, 4.5, "r1", 2, ""},
		{"a renewal acknowledged after the expiry", expiredLog, []Op{renewal(1, OK), renewal(6, OK)}, 5.5, "r1", 2, "a renewal sent at 6.000s through n1 was acknowledged"},
		{"untimed expiry", expiredLog, []Op{renewal(1, OK), renewal(2, OK)}, 0, "r1", 2, ""},
		{"left at the end", expiredLog[:1], []Op{renewal(1, OK)}, 0, "r1", 1, "still registered at the end"},
		{"end unknown", expiredLog[:1], []Op{renewal(1, OK)}, 0, "r1", 0, ""},
		{"never applied", expiredLog[:1], nil, 0, "r9", 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := truth(t, tc.log...)
			l := Lease{Holder: 0, Name: "l0", Alloc: "g0", TTL: s(3), Released: s(2.5), Renewals: tc.renewals,
				Register: Op{F: FRegister, Type: LeaseType, Name: "l0", Alloc: "g0", RequestID: tc.reqID, Outcome: OK, Start: 0, End: s(0.1)}}
			var sessions []Session
			if tc.seenAt > 0 {
				sessions = []Session{{Events: []EventRec{
					{Index: 2, EventType: "expired", Info: &Plugin{Type: LeaseType, Name: "l0", Alloc: "g0"}, At: s(tc.seenAt + 1)},
					{Index: 2, EventType: "expired", Info: &Plugin{Type: LeaseType, Name: "l0", Alloc: "g0"}, At: s(tc.seenAt)},
				}}}
			}
			vs, st := Leases([]Lease{l}, sessions, tr, tc.final)
			switch {
			case tc.want == "" && len(vs) > 0:
				t.Fatalf("violations %v; want none", vs)
			case tc.want != "" && (len(vs) != 1 || !strings.Contains(vs[0].Detail, tc.want)):
				t.Fatalf("violations %v; want one saying %q", vs, tc.want)
			}
			if tc.reqID == "r1" && st.Applied != 1 || tc.reqID != "r1" && st.Applied != 0 {
				t.Fatalf("applied %d", st.Applied)
			}
			if tc.seenAt == 0 && len(tc.log) == 2 && st.Untimed != 1 {
				t.Fatalf("untimed %d; want 1", st.Untimed)
			}
		})
	}
}

// A host's sync in one entry is, to the model, its single writes in
// order: the same events, and refused writes that change nothing; and the
// leader's node-health batch is its per-node marks.
func TestModelHostSyncAndHealthBatch(t *testing.T) {
	plug := func(name, alloc, value, node string) map[string]interface{} {
		return map[string]interface{}{"Type": "t", "Name": name, "AllocID": alloc, "Version": value, "NodeID": node,
			"ConnectionInfo": map[string]string{"SocketPath": "/s"}}
	}
	raw := func(v interface{}) json.RawMessage { b, _ := json.Marshal(v); return b }
	setup := func() *Registry {
		r := NewRegistry()
		r.Apply(1, "register", raw(map[string]interface{}{"Plugin": plug("x", "a1", "v1", "h1")}))
		r.Apply(2, "register", raw(map[string]interface{}{"Plugin": plug("x", "b1", "v1", "h2")}))
		r.Apply(3, "register", raw(map[string]interface{}{"Plugin": plug("y", "a1", "v1", "h1")}))
		r.Apply(4, "register", raw(map[string]interface{}{"Plugin": plug("y", "a2", "v1", "h1")}))
		return r
	}
	shapes := func(evs []ModelEvent) []string {
		var out []string
		for _, e := range evs {
			e.Index = 0
			out = append(out, e.String())
		}
		return out
	}
	batch := setup()
	res, got := batch.Apply(5, "host-sync", raw(map[string]interface{}{
		"NodeID": "h1", "IfNodeID": "h1",
		"Register":   []interface{}{plug("x", "a1", "v2", "h1"), plug("x", "b1", "v2", "h1"), plug("z", "a1", "v1", "h1")},
		"Deregister": []interface{}{map[string]interface{}{"Type": "t", "Name": "y", "AllocID": "a1", "IfModifyIndex": 3}, map[string]interface{}{"Type": "t", "Name": "y", "AllocID": "a2", "IfModifyIndex": 9}},
	}))
	single := setup()
	var want []ModelEvent
	for i, w := range []struct {
		command string
		req     interface{}
	}{
		{"conditional-register", map[string]interface{}{"Plugin": plug("x", "a1", "v2", "h1"), "IfNodeID": "h1"}},
		{"conditional-register", map[string]interface{}{"Plugin": plug("x", "b1", "v2", "h1"), "IfNodeID": "h1"}},
		{"conditional-register", map[string]interface{}{"Plugin": plug("z", "a1", "v1", "h1"), "IfNodeID": "h1"}},
		{"conditional-deregister", map[string]interface{}{"Type": "t", "Name": "y", "AllocID": "a1", "IfNodeID": "h1", "IfModifyIndex": 3}},
		{"conditional-deregister", map[string]interface{}{"Type": "t", "Name": "y", "AllocID": "a2", "IfNodeID": "h1", "IfModifyIndex": 9}},
	} {
		_, evs := single.Apply(uint64(5+i), w.command, raw(w.req))
		want = append(want, evs...)
	}
	if res != "synced" || strings.Join(shapes(got), "\n") != strings.Join(shapes(want), "\n") {
		t.Errorf("host sync: %s\n%s\nsingle writes:\n%s", res, strings.Join(shapes(got), "\n"), strings.Join(shapes(want), "\n"))
	}
	if v, _ := batch.Get("t", "x", "b1"); v != "v1" {
		t.Errorf("another node's instance after a bound host's sync: %q", v)
	}
	if res, evs := batch.Apply(6, "host-sync", raw(map[string]interface{}{"NodeID": "h1", "Register": []interface{}{plug("z", "a1", "v1", "h1")}})); res != "unchanged" || len(evs) != 0 {
		t.Errorf("a sync changing nothing: %s %v", res, evs)
	}
	res, got = batch.Apply(7, "node-health-batch", raw(map[string]interface{}{"Nodes": []interface{}{map[string]interface{}{"NodeID": "h1", "Suspect": true}, map[string]interface{}{"NodeID": "h2", "Suspect": true}}}))
	_, w1 := single.Apply(10, "node-health", raw(map[string]interface{}{"NodeID": "h1", "Suspect": true}))
	_, w2 := single.Apply(11, "node-health", raw(map[string]interface{}{"NodeID": "h2", "Suspect": true}))
	if res != "health" || strings.Join(shapes(got), "\n") != strings.Join(shapes(append(w1, w2...)), "\n") {
		t.Errorf("node-health batch: %s %v, per node %v", res, got, append(w1, w2...))
	}
}

// A state check (the servers' cross-replica check) changes nothing, and
// the FSM answers "ignored": the model agrees.
func TestGroundTruthStateCheck(t *testing.T) {
	j := journal(t, baseLog...)
	check := ApplyRecord{Index: uint64(len(j) + 1), Term: 1, Kind: "command", Command: "state-check", Result: "ignored",
		Request: json.RawMessage(`{"Node":"n1","Index":0}`)}
	j = append(j, check)
	tr, vs := Merge(map[string][]ApplyRecord{"n1": j, "n2": j})
	expectClean(t, "a state check", vs)
	expectClean(t, "writes with a state check", Writes(writeOps(), tr))
	if got := len(tr.StateAt(check.Index).List("t")); got != 2 {
		t.Fatalf("after the state check the model lists %d instances of t, want 2", got)
	}
}
