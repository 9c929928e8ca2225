package fsm

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// recorder is a Sink that keeps everything it is given.
type recorder struct {
	events   []Event
	restored []*State
}

func (r *recorder) Applied(_ *State, evs []Event) { r.events = append(r.events, evs...) }
func (r *recorder) Restored(s *State)             { r.restored = append(r.restored, s) }

// applier feeds an FSM log entries with consecutive indexes, as raft would.
type applier struct {
	t     testing.TB
	fsm   *FSM
	rec   *recorder
	index uint64
}

func newApplier(t testing.TB) *applier {
	rec := &recorder{}
	return &applier{t: t, fsm: New(rec), rec: rec}
}

func (a *applier) entry(req Request) *raft.Log {
	a.t.Helper()
	data, err := EncodeCommand(req)
	if err != nil {
		a.t.Fatalf("encode %T: %v", req, err)
	}
	a.index++
	return &raft.Log{Index: a.index, Term: 1, Type: raft.LogCommand, Data: data}
}

func (a *applier) apply(req Request) *ApplyResult {
	a.t.Helper()
	res := a.fsm.Apply(a.entry(req)).(*ApplyResult)
	if res.Err != nil {
		a.t.Fatalf("apply %T: %v", req, res.Err)
	}
	return res
}

// applyAll hands logs to the FSM one entry at a time.
func (a *applier) applyAll(logs []*raft.Log) {
	for _, l := range logs {
		a.fsm.Apply(l)
	}
}

func (a *applier) snapshot() []byte {
	a.t.Helper()
	var buf bytes.Buffer
	if err := WriteState(&buf, a.fsm.State()); err != nil {
		a.t.Fatalf("write state: %v", err)
	}
	return buf.Bytes()
}

func plugin(ptype, name, alloc string) *api.PluginInfo {
	return &api.PluginInfo{
		Type: ptype, Name: name, AllocID: alloc, Version: "1.0.0", NodeID: "n1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"},
	}
}

func reg(p *api.PluginInfo) *RegisterRequest { return &RegisterRequest{Plugin: p} }

func dereg(ptype, name, alloc string) *DeregisterRequest {
	return &DeregisterRequest{Type: ptype, Name: name, AllocID: alloc}
}

func newTestEncoder(w *bytes.Buffer) *codec.Encoder { return codec.NewEncoder(w, msgpackHandle) }

// entryList makes an entry of each request, in order.
func (a *applier) entryList(reqs ...Request) []*raft.Log {
	a.t.Helper()
	logs := make([]*raft.Log, len(reqs))
	for i, r := range reqs {
		logs[i] = a.entry(r)
	}
	return logs
}
