package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// A restore entry replaces the state with the backup's contents as of the
// entry's index, in a batch as alone: what precedes it applies first,
// the sink hears Restored (not events), what follows applies to the
// restored state; every node, batched or not, ends at the same bytes.
func TestRestoreCommand(t *testing.T) {
	backup := newApplier(t)
	backup.apply(reg(plugin("csi", "ebs", "a1")))
	backup.apply(reg(plugin("csi", "ebs", "a2")))
	backup.apply(reg(plugin("device", "gpu", "g1")))
	stream := backup.snapshot()
	req, _, err := NewRestoreRequest(stream, "")
	if err != nil {
		t.Fatal(err)
	}

	build := func(a *applier) []*raft.Log {
		var logs []*raft.Log
		for _, p := range []*api.PluginInfo{plugin("dra", "x", "1"), plugin("dra", "y", "1"), plugin("csi", "ebs", "old")} {
			logs = append(logs, a.entry(reg(p)))
		}
		logs = append(logs, a.entry(req))
		logs = append(logs, a.entry(reg(plugin("csi", "efs", "b1"))))
		return logs
	}
	one, batched := newApplier(t), newApplier(t)
	one.applyAll(build(one))
	logs := build(batched)
	out := batched.fsm.ApplyBatch(logs)
	if len(out) != len(logs) {
		t.Fatalf("%d responses for %d entries", len(out), len(logs))
	}
	if r := out[3].(*ApplyResult); r.Err != nil || r.Result != api.ResultRestored || r.Index != 4 {
		t.Fatalf("restore's response: %+v", r)
	}
	if r := out[4].(*ApplyResult); r.Err != nil || r.Result != api.ResultRegistered || r.Index != 5 {
		t.Fatalf("the write after it: %+v", r)
	}
	for name, a := range map[string]*applier{"one by one": one, "batched": batched} {
		s := a.fsm.State()
		if s.Index() != 5 || s.Len() != 4 || s.Instance("dra", "x", "1") != nil || s.Instance("csi", "ebs", "old") != nil ||
			s.Instance("device", "gpu", "g1") == nil || s.Instance("csi", "efs", "b1") == nil {
			t.Fatalf("%s: state at %d with %d instances: %v", name, s.Index(), s.Len(), s.Types())
		}
		if len(a.rec.restored) != 1 || a.rec.restored[0].Index() != 4 {
			t.Fatalf("%s: sink heard %d restores", name, len(a.rec.restored))
		}
		// Events: the three writes before, the one after; none for the
		// restore itself (readers reset instead).
		if len(a.rec.events) != 4 || a.rec.events[3].Index != 5 {
			t.Fatalf("%s: events %+v", name, a.rec.events)
		}
	}
	if !bytes.Equal(one.snapshot(), batched.snapshot()) {
		t.Fatal("one by one and batched differ")
	}
}

func TestRestoreRefusals(t *testing.T) {
	if _, _, err := NewRestoreRequest([]byte("not a state"), ""); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a bad stream: %v", err)
	}
	if _, err := EncodeCommand(&RestoreRequest{}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("an empty restore: %v", err)
	}
	// A restore whose state does not decode (which the edge never sends)
	// is refused alike everywhere, and the state stays.
	a := newApplier(t)
	a.apply(reg(plugin("csi", "ebs", "a1")))
	before := a.snapshot()
	data, err := EncodeCommand(&RestoreRequest{StateGzip: []byte("not gzip")})
	if err != nil {
		t.Fatal(err)
	}
	res := a.fsm.Apply(&raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: data}).(*ApplyResult)
	if res.Err == nil || a.fsm.State().Index() != 2 || len(a.rec.restored) != 0 {
		t.Fatalf("a bad restore: %+v, index %d", res, a.fsm.State().Index())
	}
	after := a.snapshot()
	if bytes.Equal(before, after) {
		t.Fatal("the index did not advance") // only the index differs
	}
	if a.fsm.State().Instance("csi", "ebs", "a1") == nil {
		t.Fatal("the state changed")
	}
}

// A backup from further along than the log (its index above the restore
// entry's) is restamped: each list keeps its order at indexes just below
// the entry's, ACL tokens and the bootstrap move to it, the request window
// starts empty, and the result is a state the FSM itself would accept
// from a snapshot (ReadState of its stream).
func TestRestoreFromFurtherAlong(t *testing.T) {
	far := newApplier(t)
	far.index = 5000
	far.apply(&ACLBootstrapRequest{Token: token("boot", "s1", api.ACLPolicy{Kind: api.ACLOperator})})
	far.apply(&ACLTokenSetRequest{Token: token("w", "s2", api.ACLPolicy{Kind: api.ACLWrite})})
	for _, a := range []string{"a1", "a2", "a3"} {
		r := reg(plugin("csi", "ebs", a))
		r.RequestID = "req-" + a
		far.apply(r)
	}
	far.apply(reg(plugin("device", "gpu", "g1")))
	req, _, err := NewRestoreRequest(far.snapshot(), "")
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t)
	a.apply(reg(plugin("dra", "x", "1")))
	a.index = 9 // the restore lands at 10
	res := a.apply(req)
	s := a.fsm.State()
	if res.Index != 10 || s.Index() != 10 || s.Len() != 4 {
		t.Fatalf("restore at %d: state at %d with %d instances", res.Index, s.Index(), s.Len())
	}
	var got []string
	for _, p := range s.Instances("csi", "ebs") {
		got = append(got, fmt.Sprintf("%s@%d/%d", p.AllocID, p.CreateIndex, p.ModifyIndex))
	}
	if strings.Join(got, " ") != "a3@10/10 a2@9/9 a1@8/8" {
		t.Fatalf("ebs restamped: %v", got)
	}
	if p := s.Newest("device", "gpu"); p.ModifyIndex != 10 {
		t.Fatalf("gpu at %d", p.ModifyIndex)
	}
	if s.ACLBootstrapped() != 10 || len(s.ACLTokens()) != 2 || s.ACLTokens()[0].CreateIndex != 10 {
		t.Fatalf("ACL: bootstrap %d, tokens %+v", s.ACLBootstrapped(), s.ACLTokens())
	}
	if _, ok := s.Request("req-a1"); ok {
		t.Fatal("a request ID of the other history survived")
	}
	var buf bytes.Buffer
	if err := WriteState(&buf, s); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadState(&buf); err != nil {
		t.Fatalf("the restamped state does not read back: %v", err)
	}
	// Later writes continue above it.
	if r := a.apply(reg(plugin("csi", "ebs", "a4"))); r.Index != 11 || a.fsm.State().Newest("csi", "ebs").AllocID != "a4" {
		t.Fatalf("a write after: %+v", r)
	}

	// A recency list too long for the restore's index is refused alike
	// everywhere, and nothing changes (the edge pads the log first).
	b := newApplier(t)
	b.apply(reg(plugin("dra", "x", "1")))
	before := b.fsm.State()
	long := newApplier(t)
	long.index = 100
	for i := 0; i < 5; i++ {
		long.apply(reg(plugin("csi", "ebs", fmt.Sprint(i))))
	}
	lreq, _, err := NewRestoreRequest(long.snapshot(), "")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := EncodeCommand(lreq)
	r := b.fsm.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: data}).(*ApplyResult)
	if r.Err == nil || b.fsm.State().Instance("dra", "x", "1") == nil || b.fsm.State().Len() != before.Len() {
		t.Fatalf("a list of 5 restored at index 2: %+v", r)
	}
}

// A restore sent twice with one request ID (a client's retry after a
// timeout or a leader change) applies once: the second copy answers the
// first one's result and leaves alone what was written between the two.
// Without the ID in the restored window, the second copy installed the
// backup again over the acknowledged write. The record survives a
// snapshot of the state.
func TestRestoreWithRequestIDAppliesOnce(t *testing.T) {
	backup := newApplier(t)
	backup.apply(reg(plugin("csi", "ebs", "a1")))
	req, _, err := NewRestoreRequest(backup.snapshot(), "restore-1")
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t)
	a.apply(reg(plugin("dra", "x", "1")))
	first := a.apply(req)
	if first.Result != api.ResultRestored || first.Duplicate {
		t.Fatalf("first restore: %+v", first)
	}
	a.apply(reg(plugin("csi", "efs", "after")))
	again := a.apply(req)
	if !again.Duplicate || again.Index != first.Index || again.Result != api.ResultRestored {
		t.Fatalf("the retry: %+v, want the first's result at %d", again, first.Index)
	}
	s := a.fsm.State()
	if s.Instance("csi", "efs", "after") == nil || s.Instance("csi", "ebs", "a1") == nil || s.Len() != 2 {
		t.Fatalf("after the retry: %d instances, the write between the two restores is %v", s.Len(), s.Instance("csi", "efs", "after"))
	}
	if s.Index() != a.index {
		t.Fatalf("state at %d, want %d", s.Index(), a.index)
	}
	read, err := ReadState(bytes.NewReader(a.snapshot()))
	if err != nil {
		t.Fatalf("snapshot after a restore with a request ID: %v", err)
	}
	if rec, ok := read.Request("restore-1"); !ok || rec.Result != api.ResultRestored || rec.Index != first.Index {
		t.Fatalf("restored window: %+v %v", rec, ok)
	}
}
