package check

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// Outcomes of an operation.
const (
	OK      = "ok"
	Fail    = "fail"    // definitely did not happen
	Unknown = "unknown" // may have happened
)

// Functions.
const (
	FRegister   = "register"
	FDeregister = "deregister"
	FGet        = "get"
	FList       = "list"
)

// Item is one plugin instance as the suite sees it: the value is the
// plugin's Version, unique per write.
type Item struct {
	Name  string
	Alloc string
	Value string
}

// Op is one client operation: its invocation and its completion.
type Op struct {
	ID        int
	Process   int
	Node      string // the node addressed
	F         string
	Type      string
	Name      string `json:",omitempty"`
	Alloc     string `json:",omitempty"`
	Value     string `json:",omitempty"`
	RequestID string `json:",omitempty"`
	Stale     bool   `json:",omitempty"` // read with consistency=stale
	TTL       string `json:",omitempty"` // register: the lease's TTL ("3s")

	Outcome string
	Result  string `json:",omitempty"` // write result
	Index   uint64 `json:",omitempty"` // write index, or the index a read reports
	Found   bool   `json:",omitempty"` // get
	Got     string `json:",omitempty"` // get: the value read
	List    []Item `json:",omitempty"` // list: newest per name, by name
	Error   string `json:",omitempty"`
	Start   int64  // ns since the run began (monotonic)
	End     int64
}

// IsWrite reports whether the op changes state.
func (o *Op) IsWrite() bool { return o.F == FRegister || o.F == FDeregister }

// Plugin is an instance in an event or reset.
type Plugin struct {
	Type, Name, Alloc, Value string
	ModifyIndex              uint64
}

// EventRec is one line a subscriber received.
type EventRec struct {
	Index     uint64
	EventType string   // registered, updated, deregistered, reset, heartbeat
	Info      *Plugin  `json:",omitempty"`
	Current   *Plugin  `json:",omitempty"`
	Plugins   []Plugin `json:",omitempty"`
	At        int64
}

// Session is one connection of a subscriber: from its resume index until
// the connection ended.
type Session struct {
	Subscriber int
	Seq        int // the session's number within its subscriber
	Node       string
	Types      []string
	From       uint64
	Events     []EventRec
	Start, End int64
	EndReason  string
}

// Journal records are what the agents' -apply-log writes.
type ApplyRecord struct {
	Index     uint64
	Term      uint64
	Kind      string
	RequestID string          `json:",omitempty"`
	Command   string          `json:",omitempty"`
	Request   json.RawMessage `json:",omitempty"`
	Result    string          `json:",omitempty"`
	Removed   int             `json:",omitempty"`
	Duplicate bool            `json:",omitempty"`
	Error     string          `json:",omitempty"`
}

// LeaderObs is one observation of a node's Raft state.
type LeaderObs struct {
	Node  string
	Term  uint64
	State string
	At    int64
}

// Violation is one thing a checker found wrong.
type Violation struct {
	Checker string
	Detail  string
}

func (v Violation) String() string { return v.Checker + ": " + v.Detail }

func violation(checker, format string, args ...interface{}) Violation {
	return Violation{Checker: checker, Detail: fmt.Sprintf(format, args...)}
}

// ReadJSONL decodes one JSON value per line of path into a slice.
func ReadJSONL[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	line := 0
	for sc.Scan() {
		line++
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			// A kill -9 can cut the last line of a journal short.
			if line > 0 && !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
