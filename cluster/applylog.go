package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/internal/datadir"
)

// ApplyRecord is one line of an apply log.
type ApplyRecord struct {
	Index uint64
	Term  uint64
	Kind  string // "command", "configuration", or "restore" (a snapshot replaced the state)
	// RequestID is the caller's ID (api.UnscopedRequestID of the one
	// recorded, which is scoped to the caller and the kind of write).
	RequestID string      `json:",omitempty"`
	Command   string      `json:",omitempty"` // register, deregister, deregister-node
	Request   fsm.Request `json:",omitempty"`
	Result    api.Result  `json:",omitempty"`
	Removed   int         `json:",omitempty"`
	Duplicate bool        `json:",omitempty"`
	Error     string      `json:",omitempty"`
}

// applyLog records every entry the FSM applies to a file (machine calls
// it after the FSM answered). It is a test instrument: raft's FSM
// goroutine is its only writer, and it writes (to the OS, not fsync'ed)
// before raft hands the response back, so a kill -9 loses nothing that was
// acknowledged. Each batch is one write: a kill -9 leaves all of it in the
// file or none, never a torn line that the next process would append to (a
// bufio.Writer wrote out a full buffer in the middle of a record: the
// fault suite's deposed-leader family killed a server applying a batch,
// and its apply log no longer parsed). A nil *applyLog records nothing.
type applyLog struct {
	mu sync.Mutex     // guards f (Close may race with the FSM goroutine)
	f  io.WriteCloser // the file; nil once closed
}

func openApplyLog(path string) (*applyLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, datadir.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open apply log: %w", err)
	}
	return &applyLog{f: f}, nil
}

// record writes a batch's records: its entries and what the FSM answered
// each (out).
func (j *applyLog) record(logs []*raft.Log, out []interface{}) {
	if j == nil {
		return
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i, l := range logs {
		rec := ApplyRecord{Index: l.Index, Term: l.Term, Kind: "configuration"}
		if l.Type == raft.LogCommand {
			rec.Kind = "command"
			if req, err := fsm.DecodeCommand(l.Data); err == nil {
				rec.Request, rec.RequestID, rec.Command = req, api.UnscopedRequestID(req.ID()), req.CommandType().String()
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
	j.write(buf.Bytes())
}

// restored records that a snapshot replaced the state, at index.
func (j *applyLog) restored(index uint64) {
	if j == nil {
		return
	}
	b, _ := json.Marshal(&ApplyRecord{Index: index, Kind: "restore"})
	j.write(append(b, '\n'))
}

// write appends b to the apply log in one write, unless it is closed.
func (j *applyLog) write(b []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		j.f.Write(b)
	}
}

func (j *applyLog) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
