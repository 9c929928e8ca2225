package fsm

import (
	"fmt"

	"github.com/plugreg/plugreg/api"
)

// RequestWindow is how many recent request IDs the state remembers. It is a
// constant, not a setting: every node must evict the same IDs at the same
// index, or a retry could apply on one node and not on another.
const RequestWindow = 65536

// RequestRecord is the outcome of one write that carried a request ID. A
// retry of that ID is answered with it instead of being applied again.
type RequestRecord struct {
	ID      string
	Index   uint64
	Result  api.Result
	Removed int
}

// requests is the bounded window of recent request IDs. It is written
// only by the apply goroutine and costs no copy per write: the records sit
// in log order in an append-only slice that every State shares (a State's
// log is a view of it: records are never changed once appended, an
// append writes past the end of every published view, and an eviction
// moves this State's start forward), and byID, the apply goroutine's map
// for lookups, is changed in place. A published State's byID must not be
// read by anyone else: readers go through log (State.Request).
//
// Not immutable radix trees: their path copies cost about a third of the
// FSM's CPU per write and a fifth of the bytes a server allocated
// (docs/benchmarks.md).
type requests struct {
	log  []RequestRecord
	byID map[string]RequestRecord
}

func newRequests() requests {
	return requests{byID: make(map[string]RequestRecord)}
}

// get is for the apply goroutine (and a State being built).
func (r requests) get(id string) (RequestRecord, bool) {
	rec, ok := r.byID[id]
	return rec, ok
}

// add records rec and evicts the oldest records past RequestWindow. An ID
// already in the window moves to rec's index (apply never re-adds one, but
// a restore records its ID in the backup's window, which may hold it): the
// log is then rebuilt without the old record, in a new array, so that no
// published view changes.
func (r *requests) add(rec RequestRecord) {
	if r.byID == nil {
		*r = newRequests()
	}
	if old, ok := r.byID[rec.ID]; ok {
		log := make([]RequestRecord, 0, len(r.log))
		for _, x := range r.log {
			if x.Index != old.Index {
				log = append(log, x)
			}
		}
		r.log = log
	}
	r.byID[rec.ID] = rec
	r.log = append(r.log, rec)
	for len(r.log) > RequestWindow {
		delete(r.byID, r.log[0].ID)
		r.log = r.log[1:]
	}
}

func (r requests) len() int { return len(r.log) }

// walk visits records in log order.
func (r requests) walk(fn func(RequestRecord) bool) {
	for _, rec := range r.log {
		if !fn(rec) {
			return
		}
	}
}

// find looks id up in the log alone, so any goroutine may call it on a
// published State: O(window), for tests and tools.
func (r requests) find(id string) (RequestRecord, bool) {
	for i := len(r.log) - 1; i >= 0; i-- {
		if r.log[i].ID == id {
			return r.log[i], true
		}
	}
	return RequestRecord{}, false
}

// recordable are the results a request record may hold: every result a
// command with a request ID can have (State.apply records it), ACL
// commands' included. The snapshot reader refuses a record whose result is
// not here, so a result missing here makes every snapshot that holds one
// unreadable; WriteState checks each record with checkRequestRecord too,
// so such a snapshot fails when taken rather than when read, and
// TestSnapshotOfAnyHistoryReadsBack drives every command type.
var recordable = map[api.Result]bool{
	api.ResultRegistered: true, api.ResultUpdated: true, api.ResultUnchanged: true,
	api.ResultDeregistered: true, api.ResultAbsent: true, ResultIgnored: true,
	ResultCreated: true, ResultDeleted: true, api.ResultRestored: true,
}

func checkRequestRecord(rec *RequestRecord, prev uint64, index uint64) error {
	if rec.ID == "" {
		return fmt.Errorf("empty request ID")
	}
	if err := validateRequestID(rec.ID); err != nil {
		return err
	}
	if rec.Index <= prev || rec.Index > index {
		return fmt.Errorf("request %q at index %d out of order (after %d, state at %d)", rec.ID, rec.Index, prev, index)
	}
	if !recordable[rec.Result] {
		return fmt.Errorf("request %q has result %q", rec.ID, rec.Result)
	}
	if rec.Removed < 0 {
		return fmt.Errorf("request %q removed %d", rec.ID, rec.Removed)
	}
	return nil
}
