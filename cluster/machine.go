package cluster

import (
	"io"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/cluster/raftx"
	"github.com/plugreg/plugreg/fsm"
)

// machine is the FSM raft drives on a server, wrapped once: the registry's
// FSM, and what this server takes from each batch it applies and each
// snapshot it restores, each part nil (or off) when the server runs
// without it. Raft's FSM goroutine is its only caller.
type machine struct {
	fsm *fsm.FSM
	// traced starts the apply spans of each batch's traced entries
	// (Config.Tracer).
	traced *applyTracer
	// applyLog records every entry applied (Config.ApplyLog, a test
	// instrument).
	applyLog *applyLog
	// commits learns what this server applied, to tell the followers
	// the commit index without waiting for raft's next heartbeat.
	commits *raftx.CommitNotifier
	// onRestore hears each restore's outcome (autopilot's health counts
	// the refused ones).
	onRestore func(error)
}

var _ raft.BatchingFSM = (*machine)(nil)

func (m *machine) Apply(l *raft.Log) interface{} {
	return m.ApplyBatch([]*raft.Log{l})[0]
}

func (m *machine) ApplyBatch(logs []*raft.Log) []interface{} {
	spans := m.traced.startApply(logs)
	out := m.fsm.ApplyBatch(logs)
	m.applyLog.record(logs, out)
	if k := len(logs); k > 0 && m.commits != nil {
		m.commits.AppliedUpTo(logs[k-1].Index, logs[k-1].Term)
	}
	m.traced.endApply(spans)
	return out
}

func (m *machine) Restore(rc io.ReadCloser) error {
	err := m.fsm.Restore(rc)
	if err == nil {
		m.applyLog.restored(m.fsm.State().Index())
	}
	if m.onRestore != nil {
		m.onRestore(err)
	}
	return err
}

func (m *machine) Snapshot() (raft.FSMSnapshot, error) { return m.fsm.Snapshot() }
