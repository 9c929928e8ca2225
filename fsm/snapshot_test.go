package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// randomLog builds a log of n commands over a small key space so that it
// exercises every path: new, unchanged, updated, absent, deregister-node.
func randomLog(t testing.TB, seed int64, n int) []*raft.Log {
	rng := rand.New(rand.NewSource(seed))
	a := newApplier(t)
	logs := make([]*raft.Log, 0, n)
	for i := 0; i < n; i++ {
		ptype := fmt.Sprintf("t%d", rng.Intn(3))
		name := fmt.Sprintf("n%d", rng.Intn(8))
		alloc := fmt.Sprintf("a%d", rng.Intn(6))
		var req Request
		switch x := rng.Intn(20); {
		case x < 12:
			p := plugin(ptype, name, alloc)
			p.NodeID = fmt.Sprintf("node%d", rng.Intn(4))
			p.Version = fmt.Sprintf("v%d", rng.Intn(3))
			if rng.Intn(2) == 0 {
				p.Options = map[string]string{"x": fmt.Sprint(rng.Intn(3)), "y": "z"}
			}
			req = reg(p)
		case x < 19:
			req = dereg(ptype, name, alloc)
		default:
			req = &DeregisterNodeRequest{NodeID: fmt.Sprintf("node%d", rng.Intn(4))}
		}
		if rng.Intn(3) == 0 { // some writes carry IDs, some of them reused
			setRequestID(req, fmt.Sprintf("req-%d", rng.Intn(n/2+1)))
		}
		logs = append(logs, a.entry(req))
	}
	return logs
}

func TestSnapshotRoundTripIsByteIdentical(t *testing.T) {
	a := newApplier(t)
	a.applyAll(randomLog(t, 1, 2000))
	first := a.snapshot()

	// Through the raft interfaces, as a follower installing it would.
	snap, err := a.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), first) {
		t.Fatal("Persist and WriteState disagree")
	}
	rec := &recorder{}
	b := New(rec)
	if err := b.Restore(io.NopCloser(bytes.NewReader(first))); err != nil {
		t.Fatal(err)
	}
	if len(rec.restored) != 1 || rec.restored[0].Index() != a.fsm.State().Index() || a.fsm.State().Index() != 2000 {
		t.Fatalf("sink not told of the restore at %d", a.fsm.State().Index())
	}
	var again bytes.Buffer
	if err := WriteState(&again, b.State()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again.Bytes()) {
		t.Fatal("snapshot -> restore -> snapshot is not byte-identical")
	}
	if b.State().Len() != a.fsm.State().Len() {
		t.Fatalf("instances %d vs %d", b.State().Len(), a.fsm.State().Len())
	}
}

// Two FSMs fed the same log, in different batchings, emit the same events
// and reach byte-identical snapshots.
func TestDeterminism(t *testing.T) {
	logs := randomLog(t, 7, 5000)
	one, batched := newApplier(t), newApplier(t)
	one.applyAll(logs)
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < len(logs); {
		n := 1 + rng.Intn(64)
		if i+n > len(logs) {
			n = len(logs) - i
		}
		batched.fsm.ApplyBatch(logs[i : i+n])
		i += n
	}
	if renderEvents(one.rec.events) != renderEvents(batched.rec.events) {
		t.Fatal("event sequences differ")
	}
	if len(one.rec.events) == 0 {
		t.Fatal("the log produced no events")
	}
	if !bytes.Equal(one.snapshot(), batched.snapshot()) {
		t.Fatal("snapshots differ")
	}
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	a := newApplier(t)
	a.apply(reg(plugin("csi", "ebs", "a1")))
	a.apply(reg(plugin("csi", "ebs", "a2")))
	a.apply(reg(plugin("csi", "gce", "g1")))
	good := a.snapshot()

	encode := func(vals ...interface{}) []byte {
		var buf bytes.Buffer
		w := newTestEncoder(&buf)
		for _, v := range vals {
			if err := w.Encode(v); err != nil {
				t.Fatal(err)
			}
		}
		return buf.Bytes()
	}
	p := func(alloc string, create, modify uint64) *api.PluginInfo {
		x := plugin("csi", "ebs", alloc)
		x.CreateIndex, x.ModifyIndex = create, modify
		return x
	}
	hdr := func(names, instances int) *RegistryState {
		return &RegistryState{Version: SnapshotVersion, Index: 10, Names: names, Instances: instances}
	}
	cases := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-5]},
		{"trailing data", append(append([]byte{}, good...), 0x01)},
		{"wrong version", encode(&RegistryState{Version: 99})},
		{"fewer records than header", encode(hdr(2, 1), &NameList{"csi", "ebs", []*api.PluginInfo{p("a1", 1, 1)}})},
		{"instance count mismatch", encode(hdr(1, 2), &NameList{"csi", "ebs", []*api.PluginInfo{p("a1", 1, 1)}})},
		{"empty list", encode(hdr(1, 1), &NameList{"csi", "ebs", nil})},
		{"out of order", encode(hdr(2, 2),
			&NameList{"csi", "gce", []*api.PluginInfo{{Type: "csi", Name: "gce", AllocID: "g", ConnectionInfo: &api.ConnectionInfo{Address: "x"}, CreateIndex: 1, ModifyIndex: 1}}},
			&NameList{"csi", "ebs", []*api.PluginInfo{p("a1", 1, 1)}})},
		{"duplicate name", encode(hdr(2, 2),
			&NameList{"csi", "ebs", []*api.PluginInfo{p("a1", 1, 1)}},
			&NameList{"csi", "ebs", []*api.PluginInfo{p("a2", 2, 2)}})},
		{"duplicate alloc", encode(hdr(1, 2), &NameList{"csi", "ebs", []*api.PluginInfo{p("a1", 2, 2), p("a1", 1, 1)}})},
		// A list's order is not checked against its indexes: a health
		// change behind the front gives its instance a newer ModifyIndex
		// in place (TestSnapshotAfterAHealthChangeBehindTheFront).
		{"index past state", encode(hdr(1, 1), &NameList{"csi", "ebs", []*api.PluginInfo{p("a1", 1, 11)}})},
		{"instance of another name", encode(hdr(1, 1), &NameList{"csi", "gce", []*api.PluginInfo{p("a1", 1, 1)}})},
		{"invalid instance", encode(hdr(1, 1), &NameList{"csi", "ebs", []*api.PluginInfo{{Type: "csi", Name: "ebs", AllocID: "a1", CreateIndex: 1, ModifyIndex: 1}}})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := a.fsm.Restore(io.NopCloser(bytes.NewReader(tc.in)))
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error %v, want ErrBadSnapshot", err)
			}
			if !bytes.Equal(a.snapshot(), good) {
				t.Fatal("a failed restore changed the live state")
			}
		})
	}
}

// Snapshots and readers work on an immutable root: persisting while Apply
// goes on must yield exactly the state as of Snapshot (run with -race).
func TestSnapshotWhileApplying(t *testing.T) {
	a := newApplier(t)
	logs := randomLog(t, 11, 4000)
	a.applyAll(logs[:2000])
	want := a.snapshot()
	snap, _ := a.fsm.Snapshot()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, l := range logs[2000:] {
			a.fsm.Apply(l)
		}
	}()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("snapshot saw applies made after it was taken")
	}
}

func setRequestID(req Request, id string) {
	switch r := req.(type) {
	case *RegisterRequest:
		r.RequestID = id
	case *DeregisterRequest:
		r.RequestID = id
	case *DeregisterNodeRequest:
		r.RequestID = id
	case *ConditionalDeregisterRequest:
		r.RequestID = id
	case *ConditionalRegisterRequest:
		r.RequestID = id
	}
}

// memSink is a raft.SnapshotSink over memory.
type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Close() error  { return nil }
func (m *memSink) Cancel() error { m.cancelled = true; return nil }

// A snapshot older than what the FSM has applied is refused and changes
// nothing: hashicorp/raft would otherwise rewind a follower onto it and
// panic on the entries it had compacted (found by the fault suite: a stale
// InstallSnapshot after a membership change).
func TestRestoreRefusesAnOlderSnapshot(t *testing.T) {
	a := newApplier(t)
	logs := randomLog(t, 3, 200)
	a.applyAll(logs[:100])
	older := a.snapshot()
	a.applyAll(logs[100:])
	before := a.snapshot()
	err := a.fsm.Restore(io.NopCloser(bytes.NewReader(older)))
	if !errors.Is(err, ErrStaleSnapshot) {
		t.Fatalf("restore of a snapshot at 100 onto state at 200: %v, want ErrStaleSnapshot", err)
	}
	if !bytes.Equal(a.snapshot(), before) {
		t.Fatal("a refused restore changed the state")
	}
	// The same snapshot and a newer one are fine.
	if err := a.fsm.Restore(io.NopCloser(bytes.NewReader(before))); err != nil {
		t.Fatalf("restore of the same state: %v", err)
	}
	fresh := New(nil)
	if err := fresh.Restore(io.NopCloser(bytes.NewReader(older))); err != nil {
		t.Fatalf("restore into an empty FSM: %v", err)
	}
}
