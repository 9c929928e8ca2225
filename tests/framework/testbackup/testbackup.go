// Package testbackup builds registries and their backup archives for
// tests, through an FSM of their own (as another cluster would have).
package testbackup

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/snapshot"
)

// Registry applies n registrations to a new FSM, in batches as raft
// would hand them over: instance i is of type "type{i%4}", name
// "p{i%1000}" (so each name is in one type), alloc "a{i}", node
// "n{i%100}". Its index is n.
func Registry(t testing.TB, n int) *fsm.State {
	t.Helper()
	f := fsm.New(nil)
	logs := make([]*raft.Log, 0, 1024)
	flush := func() {
		for _, r := range f.ApplyBatch(logs) {
			if err := r.(*fsm.ApplyResult).Err; err != nil {
				t.Fatal(err)
			}
		}
		logs = logs[:0]
	}
	for i := 0; i < n; i++ {
		p := &api.PluginInfo{Type: fmt.Sprintf("type%d", i%4), Name: fmt.Sprintf("p%d", i%1000), AllocID: fmt.Sprintf("a%d", i),
			NodeID: fmt.Sprintf("n%d", i%100), Version: "1.2.3", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/plugin.sock"}}
		cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: p})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: cmd})
		if len(logs) == cap(logs) {
			flush()
		}
	}
	flush()
	return f.State()
}

// Archive is the backup archive of st, taken by node "elsewhere".
func Archive(t testing.TB, st *fsm.State) []byte {
	t.Helper()
	var buf bytes.Buffer
	meta := snapshot.Meta{NodeID: "elsewhere", Term: 9, Created: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC),
		Servers: []snapshot.Server{{ID: "elsewhere", Address: "10.0.0.1:7300", Voter: true}}}
	if err := snapshot.Encode(&buf, meta, st); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
