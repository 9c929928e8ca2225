package fsm

import (
	"encoding/binary"
	"fmt"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
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

// requests is the bounded window of recent request IDs: by ID for lookup,
// by index for eviction in log order. Both trees are immutable like the
// rest of State.
type requests struct {
	byID    *iradix.Tree[RequestRecord]
	byIndex *iradix.Tree[string]
	// txID and txIndex are open during an ApplyBatch (see State.batch),
	// with n the size of txID; nil in a published State.
	txID    *iradix.Txn[RequestRecord]
	txIndex *iradix.Txn[string]
	n       int
}

func (r *requests) begin() {
	if r.byID == nil {
		*r = newRequests()
	}
	r.txID, r.txIndex, r.n = r.byID.Txn(), r.byIndex.Txn(), r.byID.Len()
}

func (r *requests) commit() {
	if r.txID == nil {
		return
	}
	r.byID, r.byIndex = r.txID.Commit(), r.txIndex.Commit()
	r.txID, r.txIndex = nil, nil
}

func newRequests() requests {
	return requests{byID: iradix.New[RequestRecord](), byIndex: iradix.New[string]()}
}

func indexKey(i uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], i)
	return k[:]
}

func (r requests) get(id string) (RequestRecord, bool) {
	if r.txID != nil {
		return r.txID.Get([]byte(id))
	}
	if r.byID == nil {
		return RequestRecord{}, false
	}
	return r.byID.Get([]byte(id))
}

// add records rec and evicts the oldest records past RequestWindow. An ID
// already in the window moves to rec's index (apply never re-adds one, but
// a restore records its ID in the backup's window, which may hold it).
func (r *requests) add(rec RequestRecord) {
	if r.txID != nil {
		if old, replaced := r.txID.Insert([]byte(rec.ID), rec); !replaced {
			r.n++
		} else {
			r.txIndex.Delete(indexKey(old.Index))
		}
		r.txIndex.Insert(indexKey(rec.Index), rec.ID)
		for r.n > RequestWindow {
			k, id, _ := r.txIndex.Root().Minimum()
			r.txIndex.Delete(k)
			if _, ok := r.txID.Delete([]byte(id)); ok {
				r.n--
			}
		}
		return
	}
	if r.byID == nil {
		*r = newRequests()
	}
	var (
		old      RequestRecord
		replaced bool
	)
	r.byID, old, replaced = r.byID.Insert([]byte(rec.ID), rec)
	if replaced {
		r.byIndex, _, _ = r.byIndex.Delete(indexKey(old.Index))
	}
	r.byIndex, _, _ = r.byIndex.Insert(indexKey(rec.Index), rec.ID)
	for r.byID.Len() > RequestWindow {
		k, id, _ := r.byIndex.Root().Minimum()
		r.byIndex, _, _ = r.byIndex.Delete(k)
		r.byID, _, _ = r.byID.Delete([]byte(id))
	}
}

func (r requests) len() int {
	if r.byID == nil {
		return 0
	}
	return r.byID.Len()
}

// walk visits records in log order.
func (r requests) walk(fn func(RequestRecord) bool) {
	if r.byIndex == nil {
		return
	}
	r.byIndex.Root().Walk(func(_ []byte, id string) bool {
		rec, _ := r.byID.Get([]byte(id))
		return !fn(rec)
	})
}

// recordable are the results a request record may hold: every result a
// command with a request ID can have (State.apply records it), ACL
// commands' included. The snapshot reader refused "deleted" once, so every
// snapshot taken after an ACL token deletion with a request ID was
// unreadable; WriteState now checks each record with checkRequestRecord
// too, and TestSnapshotOfAnyHistoryReadsBack drives every command type.
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
