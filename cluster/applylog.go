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

// applyLogFSM records every entry the FSM applies to a file, then lets the
// real FSM answer. It is a test instrument: raft's FSM goroutine is its only
// writer, and it writes (to the OS, not fsync'ed) before raft hands the
// response back, so a kill -9 loses nothing that was acknowledged. Each
// batch is one write: a kill -9 leaves all of it in the file or none,
// never a torn line that the next process would append to (a bufio.Writer
// writes out a full buffer in the middle of a record, so a server killed
// while applying a batch, as the fault suite's deposed-leader family does,
// would leave an apply log that does not parse).
type applyLogFSM struct {
	*fsm.FSM
	mu sync.Mutex     // guards f (Close may race with the FSM goroutine)
	f  io.WriteCloser // the file; nil once closed
}

var _ raft.BatchingFSM = (*applyLogFSM)(nil)

func openApplyLogFSM(inner *fsm.FSM, path string) (*applyLogFSM, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, datadir.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open apply log: %w", err)
	}
	return &applyLogFSM{FSM: inner, f: f}, nil
}

func (j *applyLogFSM) Apply(l *raft.Log) interface{} {
	return j.ApplyBatch([]*raft.Log{l})[0]
}

func (j *applyLogFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := j.FSM.ApplyBatch(logs)
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
	return out
}

// write appends b to the apply log in one write, unless it is closed.
func (j *applyLogFSM) write(b []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		j.f.Write(b)
	}
}

func (j *applyLogFSM) Restore(rc io.ReadCloser) error {
	if err := j.FSM.Restore(rc); err != nil {
		return err
	}
	b, _ := json.Marshal(&ApplyRecord{Index: j.FSM.State().Index(), Kind: "restore"})
	j.write(append(b, '\n'))
	return nil
}

func (j *applyLogFSM) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
