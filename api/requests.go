package api

import (
	"fmt"
	"time"
)

// WriteResult is what a write did and the index of its log entry.
type WriteResult struct {
	Index  uint64
	Result Result
}

// DeregisterRequest removes one instance. With IfNodeID or IfModifyIndex
// set it is conditional: the instance is removed only if, when the entry
// is applied, it still belongs to IfNodeID and/or was last changed at
// IfModifyIndex; otherwise the write fails with ErrConflict and nothing
// changes. An absent instance is "absent" either way. A host agent uses
// IfNodeID so that it never deletes an instance another host has since
// taken over.
type DeregisterRequest struct {
	Type, Name, AllocID string
	IfNodeID            string `json:",omitempty"`
	IfModifyIndex       uint64 `json:",omitempty"`
}

// Conditional reports whether r carries a condition.
func (r *DeregisterRequest) Conditional() bool { return r.IfNodeID != "" || r.IfModifyIndex != 0 }

// Validate checks r as a request.
func (r *DeregisterRequest) Validate() error {
	if err := ValidateInstanceID(r.Type, r.Name, r.AllocID); err != nil {
		return err
	}
	if r.IfNodeID != "" {
		if err := ValidateIdentifier("node", r.IfNodeID); err != nil {
			return err
		}
	}
	return nil
}

// Consistency of a read.
type Consistency int

const (
	// Linearizable reads reflect every write acknowledged before they
	// began (read-index through the leader). The default.
	Linearizable Consistency = iota
	// Stale reads return the serving server's state at once, however old.
	Stale
)

// QueryKind names what a Query reads.
type QueryKind string

const (
	QueryTypes     QueryKind = "types"     // every type with at least one instance
	QueryList      QueryKind = "list"      // the newest instance of every name of Type
	QueryInstances QueryKind = "instances" // Type/Name's recency list, newest first
	QueryInstance  QueryKind = "instance"  // one instance
	QueryNode      QueryKind = "node"      // every instance registered with NodeID
	// QueryTypeInstances reads every instance of Type, of every name (what
	// coverage counts: one plugin name runs on many nodes). Servers before
	// it refuse it as an invalid query kind.
	QueryTypeInstances QueryKind = "type_instances"
)

// Query is one read.
type Query struct {
	Kind        QueryKind
	Type        string `json:",omitempty"`
	Name        string `json:",omitempty"`
	AllocID     string `json:",omitempty"`
	NodeID      string `json:",omitempty"`
	Consistency Consistency
	// MinIndex and Wait make a blocking query: it waits (at most Wait)
	// until an event of the queried type (any type for QueryTypes and
	// QueryNode) with an index past MinIndex has been applied, then reads.
	MinIndex uint64        `json:",omitempty"`
	Wait     time.Duration `json:",omitempty"`
}

// MaxWait bounds a blocking query's wait.
const MaxWait = 10 * time.Minute

// Validate checks q.
func (q *Query) Validate() error {
	need := map[QueryKind][]struct{ name, v string }{
		QueryTypes:         nil,
		QueryList:          {{"type", q.Type}},
		QueryTypeInstances: {{"type", q.Type}},
		QueryInstances:     {{"type", q.Type}, {"name", q.Name}},
		QueryInstance:      {{"type", q.Type}, {"name", q.Name}, {"alloc", q.AllocID}},
		QueryNode:          {{"node", q.NodeID}},
	}
	fields, ok := need[q.Kind]
	if !ok {
		return fmt.Errorf("%w: query kind %q", ErrInvalid, q.Kind)
	}
	for _, f := range fields {
		if err := ValidateIdentifier(f.name, f.v); err != nil {
			return err
		}
	}
	if q.Consistency != Linearizable && q.Consistency != Stale {
		return fmt.Errorf("%w: consistency %d", ErrInvalid, q.Consistency)
	}
	if q.Wait < 0 || q.Wait > MaxWait {
		return fmt.Errorf("%w: wait %s: want 0 to %s", ErrInvalid, q.Wait, MaxWait)
	}
	return nil
}

// QueryResult is a read's answer: Types or Plugins, by the query's kind,
// nil when nothing matched (the HTTP API answers []). QueryInstances and
// QueryInstance fail with ErrNotFound instead, still with the index read.
type QueryResult struct {
	Index       uint64 // the index of the state read
	KnownLeader bool
	// LastContact since the serving server last heard from the leader:
	// 0 on the leader, negative when it never has.
	LastContact time.Duration
	Types       []string      `json:",omitempty"`
	Plugins     []*PluginInfo `json:",omitempty"`
	// NotFound carries a not-found answer's message across the agent RPC
	// in the reply, so that its index and leader metadata cross with it
	// (an RPC error carries a code and a message only). The client agent
	// turns it back into ErrNotFound.
	NotFound string `json:",omitempty"`
}
