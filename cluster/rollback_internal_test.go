package cluster

import (
	"path/filepath"
	"testing"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/plugreg/plugreg/cluster/raftx"
)

// A server's records of the others' reports: the highest index per
// incarnation, kept in the stable store; a lower index of the same
// incarnation is a rollback; a start-time probe records nothing; a new
// incarnation (a data dir emptied and started again) starts over.
func TestAckRecords(t *testing.T) {
	db, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stable := raftx.ChecksumStableStore{StableStore: db}
	a := newAckRecords(stable)
	steps := []struct {
		rep          ackReport
		rolledBack   bool
		wantRecorded uint64
	}{
		{ackReport{Node: "n2", Incarnation: "i1", Index: 100}, false, 100},
		{ackReport{Node: "n2", Incarnation: "i1", Index: 90}, true, 100},
		{ackReport{Node: "n2", Incarnation: "i1", Index: 150, Probe: true}, false, 100},
		{ackReport{Node: "n2", Incarnation: "i1", Index: 120, Probe: true}, false, 100},
		{ackReport{Node: "n2", Incarnation: "i1", Index: 99, Probe: true}, true, 100},
		{ackReport{Node: "n2", Incarnation: "i1", Index: 200}, false, 200},
		{ackReport{Node: "n3", Incarnation: "j1", Index: 5}, false, 5},
		{ackReport{Node: "n2", Incarnation: "i2", Index: 3, Probe: true}, false, 200}, // a new dir's probe: not this record's
		{ackReport{Node: "n2", Incarnation: "i2", Index: 3}, false, 3},
	}
	for k, st := range steps {
		reply, err := a.report(st.rep)
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		if reply.RolledBack != st.rolledBack || reply.Recorded != st.wantRecorded {
			t.Fatalf("step %d %+v: answered %+v, want rolled back %v, recorded %d", k, st.rep, reply, st.rolledBack, st.wantRecorded)
		}
	}
	// Read again from the stable store, as after a restart.
	again := newAckRecords(stable)
	for node, want := range map[string]ackRecord{"n2": {"i2", 3}, "n3": {"j1", 5}, "n4": {}} {
		again.mu.Lock()
		got, err := again.getLocked(node)
		again.mu.Unlock()
		if err != nil || got != want {
			t.Fatalf("%s after a restart: %+v (%v), want %+v", node, got, err, want)
		}
	}
}

// A data dir's incarnation is made once and read back after.
func TestIncarnation(t *testing.T) {
	db, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stable := raftx.ChecksumStableStore{StableStore: db}
	first, err := incarnation(stable)
	if err != nil || len(first) != 32 {
		t.Fatalf("made %q (%v)", first, err)
	}
	if again, err := incarnation(stable); err != nil || again != first {
		t.Fatalf("read %q (%v), want %q", again, err, first)
	}
}
