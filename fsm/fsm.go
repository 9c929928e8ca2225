package fsm

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

const (

	// ResultIgnored answers a command type this binary does not know but
	// that was flagged as safe to skip.
	ResultIgnored api.Result = "ignored"
)

// ApplyResult is the response of Apply for one log entry: what raft hands
// back through ApplyFuture.Response.
type ApplyResult struct {
	Index   uint64
	Result  api.Result
	Removed int   // instances removed, for deregister, deregister-node and expire
	Err     error // the command was rejected; the state did not change
	// Refused are the writes of a HostSyncCommand its conditions left
	// alone, by position (api.HostSyncResult.Refused); the others
	// applied.
	Refused []int
	// Duplicate is set when the command's request ID was already applied:
	// Index, Result and Removed are then the original write's, and
	// nothing was applied again.
	Duplicate bool
}

// Event is one change to one instance. Info is the instance after the
// change (the removed instance for EventDeregistered); Current is the newest
// instance of Info's (Type, Name) after the change, nil when the name is
// gone. Both are shared with the state: read-only.
type Event struct {
	Index     uint64
	EventType api.EventType
	Info      *api.PluginInfo
	Current   *api.PluginInfo
}

// Sink receives what the FSM applied. It is called on the Apply path, in log
// order, and must not block.
type Sink interface {
	// Applied is called once per applied batch with the new state and the
	// events of the batch's entries (possibly none), in order.
	Applied(s *State, events []Event)
	// Restored is called after Restore swapped in a state from a snapshot.
	// Events between the previous state and this one are not known.
	Restored(s *State)
}

// FSM is plugreg's raft.BatchingFSM. Its methods are called by raft from a
// single goroutine; State may be called from any goroutine at any time.
type FSM struct {
	state   atomic.Pointer[State]
	sink    Sink
	onCheck func(*State, *StateCheckRequest) // nil: state checks are applied as any entry
}

var _ raft.BatchingFSM = (*FSM)(nil)

// New returns an FSM holding the empty state. sink may be nil.
func New(sink Sink) *FSM {
	f := &FSM{sink: sink}
	f.state.Store(NewState())
	return f
}

// State returns the current state in O(1). Its Index is the FSM's own
// applied index: the last entry whose effects are fully in the state (raft's
// AppliedIndex is only what raft has handed over).
func (f *FSM) State() *State { return f.state.Load() }

// Apply applies one log entry.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies entries in order, publishes the resulting state once,
// then hands the batch's events to the sink. Each command's response is an
// *ApplyResult; other entry types (configuration) answer nil but still
// advance the index.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	// A restore replaces the state whole: what precedes it in the batch
	// is applied and published first, the restored state is published
	// alone (the sink's Restored: readers reset), and what follows
	// applies to it. A state check ends a batch of its own, so that the
	// hook sees the state as of the check's index on every server,
	// however each batched its entries.
	out := make([]interface{}, 0, len(logs))
	for len(logs) > 0 {
		i := 0
		for i < len(logs) && !isRestore(logs[i]) && !(f.onCheck != nil && isStateCheck(logs[i])) {
			i++
		}
		switch {
		case i == len(logs):
			return append(out, f.applyCommands(logs)...)
		case isRestore(logs[i]):
			if i > 0 {
				out = append(out, f.applyCommands(logs[:i])...)
			}
			out = append(out, f.restore(logs[i]))
		default:
			out = append(out, f.applyCommands(logs[:i+1])...)
			f.stateChecked(logs[i])
		}
		logs = logs[i+1:]
	}
	return out
}

// restore applies a restore entry.
func (f *FSM) restore(l *raft.Log) interface{} {
	s, res := restoredState(f.state.Load(), l)
	if s == nil {
		// Refused alike everywhere, or a retry of a restore already
		// applied; the index still advances.
		f.applyCommands([]*raft.Log{{Index: l.Index, Term: l.Term, Type: raft.LogNoop}})
		return res
	}
	f.state.Store(s)
	if f.sink != nil {
		f.sink.Restored(s)
	}
	return res
}

// applyCommands applies entries that hold no restore, publishes the
// resulting state once, then hands their events to the sink.
func (f *FSM) applyCommands(logs []*raft.Log) []interface{} {
	cur := f.state.Load()
	next := *cur // a private copy: its trees are replaced, never changed
	if len(logs) > 1 || (len(logs) == 1 && writesMany(logs[0])) {
		// One entry of one write gains nothing from a transaction and
		// pays for opening it.
		next.beginBatch()
	}
	out := make([]interface{}, len(logs))
	var events []Event
	for i, l := range logs {
		if l.Index > next.index {
			next.index = l.Index
		}
		if l.Type != raft.LogCommand {
			continue
		}
		res, evs := next.apply(l.Index, l.Data)
		out[i] = res
		events = append(events, evs...)
	}
	next.commitBatch()
	next.ownNodes = nil // published: later States clone it again
	f.state.Store(&next)
	if f.sink != nil {
		f.sink.Applied(&next, events)
	}
	return out
}

// writesMany reports whether l is an entry that writes many instances at
// once (a host's sync): one whose writes share a transaction as a batch's
// entries do.
func writesMany(l *raft.Log) bool {
	return l.Type == raft.LogCommand && len(l.Data) > 0 &&
		(CommandType(l.Data[0]) == HostSyncCommand || CommandType(l.Data[0]) == NodeHealthBatchCommand)
}

// apply decodes and applies one command entry.
func (s *State) apply(index uint64, data []byte) (*ApplyResult, []Event) {
	req, err := DecodeCommand(data)
	if err != nil {
		if errors.Is(err, api.ErrUnknownCommand) {
			if CommandType(data[0])&IgnoreUnknownTypeFlag != 0 {
				return &ApplyResult{Index: index, Result: ResultIgnored}, nil
			}
			// Applying past a command we do not understand would make
			// this node's state silently differ from newer nodes'.
			panic(fmt.Sprintf("fsm: entry %d: %v", index, err))
		}
		// Decoding is deterministic, so every node rejects it alike.
		return &ApplyResult{Index: index, Err: fmt.Errorf("apply entry %d: %w", index, err)}, nil
	}
	id := req.ID()
	if rec, ok := s.requests.get(id); id != "" && ok {
		return &ApplyResult{Index: rec.Index, Result: rec.Result, Removed: rec.Removed, Duplicate: true}, nil
	}
	var (
		res     api.Result
		evs     []Event
		refused []int
		removed int
	)
	switch r := req.(type) {
	case *RegisterRequest:
		res, evs = s.register(index, r.Plugin)
	case *ConditionalRegisterRequest:
		if err := s.CheckOwner(r.Plugin, r.IfNodeID); err != nil {
			// Deterministic, as a conditional deregister's refusal.
			return &ApplyResult{Index: index, Err: fmt.Errorf("apply entry %d: %w", index, err)}, nil
		}
		res, evs = s.register(index, r.Plugin)
	case *DeregisterRequest:
		res, evs = s.deregister(index, r.Type, r.Name, r.AllocID)
	case *ConditionalDeregisterRequest:
		if err := s.checkCondition(r); err != nil {
			// Deterministic: every node sees the same state here.
			return &ApplyResult{Index: index, Err: fmt.Errorf("apply entry %d: %w", index, err)}, nil
		}
		res, evs = s.deregister(index, r.Type, r.Name, r.AllocID)
	case *DeregisterNodeRequest:
		// The node index finds its instances (through the batch's
		// transactions, like every other read here).
		res, evs = s.deregisterNode(index, r.NodeID)
	case *ExpireRequest:
		res, evs = s.expire(index, r)
	case *NodeHealthRequest:
		res, evs = s.nodeHealth(index, r)
	case *NodeHealthBatchRequest:
		res, evs = s.nodeHealthBatch(index, r)
	case *HostSyncRequest:
		res, evs, refused, removed = s.hostSync(index, r)
	case *PaddingRequest, *StateCheckRequest:
		return &ApplyResult{Index: index, Result: ResultIgnored}, nil
	case *ACLBootstrapRequest, *ACLTokenSetRequest, *ACLTokenDeleteRequest:
		var err error
		if res, err = s.applyACL(index, r); err != nil {
			return &ApplyResult{Index: index, Err: fmt.Errorf("apply entry %d: %w", index, err)}, nil
		}
	}
	ar := &ApplyResult{Index: index, Result: res, Removed: removed, Refused: refused}
	if res == api.ResultDeregistered || res == ResultExpired {
		ar.Removed = len(evs)
	}
	if id != "" {
		s.requests.add(RequestRecord{ID: id, Index: index, Result: res, Removed: ar.Removed})
	}
	return ar, evs
}

// Snapshot returns the current state for raft to persist. It is O(1): the
// state is immutable, so Persist may stream it while Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{state: f.state.Load()}, nil
}

// Restore replaces the state with the one in rc. It builds the new state
// completely before swapping it in, so a bad snapshot leaves the live state
// untouched.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := ReadState(rc)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	// Never go back. hashicorp/raft v1.7.3 installs whatever snapshot a
	// leader sends, even one older than what this node has applied (a
	// stale InstallSnapshot, e.g. from a replication goroutine of a
	// membership change that was still running); it then rewinds its
	// applied index and panics on the next commit ("log not found": the
	// entries after the snapshot were compacted here). The committed
	// history is one sequence, so an older snapshot holds nothing this
	// state lacks: refuse it and raft answers the leader with an error.
	// (A restore of an operator's backup must therefore carry a fresh
	// index, the index of the entry that restores it.)
	if cur := f.State(); s.Index() < cur.Index() {
		return fmt.Errorf("restore: %w: snapshot at index %d, state already at %d", ErrStaleSnapshot, s.Index(), cur.Index())
	}
	f.state.Store(s)
	if f.sink != nil {
		f.sink.Restored(s)
	}
	return nil
}

type snapshot struct{ state *State }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := WriteState(sink, s.state); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot at %d: %w", s.state.index, err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}
