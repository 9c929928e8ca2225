package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
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
	req, _, err := NewRestoreRequest(stream)
	if err != nil {
		t.Fatal(err)
	}

	build := func(a *applier) []*raft.Log {
		var logs []*raft.Log
		for _, p := range []*PluginInfo{plugin("dra", "x", "1"), plugin("dra", "y", "1"), plugin("csi", "ebs", "old")} {
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
	if r := out[3].(*ApplyResult); r.Err != nil || r.Result != ResultRestored || r.Index != 4 {
		t.Fatalf("restore's response: %+v", r)
	}
	if r := out[4].(*ApplyResult); r.Err != nil || r.Result != ResultRegistered || r.Index != 5 {
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
	if _, _, err := NewRestoreRequest([]byte("not a state")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad stream: %v", err)
	}
	if _, err := EncodeCommand(&RestoreRequest{}); !errors.Is(err, ErrInvalid) {
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
