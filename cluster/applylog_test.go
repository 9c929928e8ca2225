package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// writes records every Write, as the journal's file.
type writes struct{ calls [][]byte }

func (w *writes) Write(b []byte) (int, error) {
	w.calls = append(w.calls, bytes.Clone(b))
	return len(b), nil
}
func (w *writes) Close() error { return nil }

// A batch goes to the journal in one write, however large: a kill -9
// between two writes then leaves whole lines only, never a torn one that
// the next process would append to.
func TestApplyLogWritesABatchAtOnce(t *testing.T) {
	w := &writes{}
	j := &machine{fsm: fsm.New(nil), applyLog: &applyLog{f: w}}
	var logs []*raft.Log
	for i := 1; i <= 100; i++ { // about 30 KB of records, past any buffer's size
		cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: fmt.Sprintf("a%d", i),
			NodeID: "n1", Version: strings.Repeat("v", 100), ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}, RequestID: fmt.Sprintf("r%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: cmd})
	}
	j.ApplyBatch(logs)
	if len(w.calls) != 1 {
		t.Fatalf("%d writes for one batch; want 1", len(w.calls))
	}
	lines := strings.Split(strings.TrimSuffix(string(w.calls[0]), "\n"), "\n")
	if len(lines) != len(logs) {
		t.Fatalf("%d lines for %d entries", len(lines), len(logs))
	}
	for i, l := range lines {
		var rec struct { // ApplyRecord's Request is an interface
			Index     uint64
			RequestID string
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Index != uint64(i+1) || rec.RequestID != fmt.Sprintf("r%d", i+1) {
			t.Fatalf("line %d: %+v, %v", i+1, rec, err)
		}
	}
	if err := j.applyLog.Close(); err != nil {
		t.Fatal(err)
	}
	j.ApplyBatch(logs[:1]) // closed: applied, not written
	if len(w.calls) != 1 {
		t.Fatalf("a write after Close")
	}
}
