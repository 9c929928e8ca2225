package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/fsm"
)

// JournalRecord is one line of an apply journal.
type JournalRecord struct {
	Index     uint64
	Term      uint64
	Kind      string      // "command", "configuration", or "restore" (a snapshot replaced the state)
	RequestID string      `json:",omitempty"`
	Command   string      `json:",omitempty"` // register, deregister, deregister-node
	Request   fsm.Request `json:",omitempty"`
	Result    fsm.Result  `json:",omitempty"`
	Removed   int         `json:",omitempty"`
	Duplicate bool        `json:",omitempty"`
	Error     string      `json:",omitempty"`
}

// journalFSM records every entry the FSM applies to a file, then lets the
// real FSM answer. It is a test instrument: raft's FSM goroutine is its only
// writer, and it writes (to the OS, not fsync'ed) before raft hands the
// response back, so a kill -9 loses nothing that was acknowledged.
type journalFSM struct {
	*fsm.FSM
	mu sync.Mutex // guards w, f (Close may race with the FSM goroutine)
	f  *os.File
	w  *bufio.Writer
}

var _ raft.BatchingFSM = (*journalFSM)(nil)

func openJournalFSM(inner *fsm.FSM, path string) (*journalFSM, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open apply journal: %w", err)
	}
	return &journalFSM{FSM: inner, f: f, w: bufio.NewWriter(f)}, nil
}

func (j *journalFSM) Apply(l *raft.Log) interface{} {
	return j.ApplyBatch([]*raft.Log{l})[0]
}

func (j *journalFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := j.FSM.ApplyBatch(logs)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.w == nil {
		return out
	}
	enc := json.NewEncoder(j.w)
	for i, l := range logs {
		rec := JournalRecord{Index: l.Index, Term: l.Term, Kind: "configuration"}
		if l.Type == raft.LogCommand {
			rec.Kind = "command"
			if req, err := fsm.DecodeCommand(l.Data); err == nil {
				rec.Request, rec.RequestID, rec.Command = req, req.ID(), req.CommandType().String()
			}
			if res, ok := out[i].(*fsm.ApplyResult); ok {
				rec.Result, rec.Removed, rec.Duplicate = res.Result, res.Removed, res.Duplicate
				if res.Err != nil {
					rec.Error = res.Err.Error()
				}
			}
		}
		enc.Encode(&rec)
	}
	j.w.Flush()
	return out
}

func (j *journalFSM) Restore(rc io.ReadCloser) error {
	if err := j.FSM.Restore(rc); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.w != nil {
		json.NewEncoder(j.w).Encode(&JournalRecord{Index: j.FSM.State().Index(), Kind: "restore"})
		j.w.Flush()
	}
	return nil
}

func (j *journalFSM) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.w == nil {
		return nil
	}
	err := j.w.Flush()
	j.w = nil
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	return err
}
