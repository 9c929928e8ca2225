package fsm

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// RestoreCommand replaces the whole state with an operator's backup (a
// snapshot stream, as WriteState writes it). It is a log entry, not
// hashicorp/raft's Restore: that one makes the leader take the state
// before any follower has it, so a leader that dies meanwhile leaves a
// cluster that never had the restore and a node that did, whose later
// snapshots Restore here refuses as stale. As an entry it is committed
// by a quorum or not at all, and every node applies it at the same index.
// Binaries older than it panic on it (an unknown type without
// IgnoreUnknownTypeFlag): every server must run a release that knows it
// before anyone restores.
const RestoreCommand CommandType = 8

// MaxRestoreSize bounds a RestoreRequest's compressed state: raft-wal
// refuses entries over 64 MiB.
const MaxRestoreSize = 60 << 20

// RestoreRequest carries the state to restore, gzipped (the stream of a
// large registry compresses about fivefold, and it is written to every
// node's log). Build it with NewRestoreRequest.
type RestoreRequest struct {
	StateGzip []byte
	// RequestID makes a retried restore apply once. Without it, a client
	// that resent a restore it could not see acknowledged (a timeout, a
	// leader change) had the second copy install the backup again over
	// every write acknowledged between the two.
	RequestID string `codec:",omitempty"`
}

func (*RestoreRequest) CommandType() CommandType { return RestoreCommand }

// ID is the restore's request ID. The state it installs replaces the
// window of request IDs too, so the apply records this one in the new
// window (restoredState).
func (r *RestoreRequest) ID() string { return r.RequestID }

// Validate checks the size and the request ID: decoding the state is the
// apply's work (and the edge's, which decodes it before it sends the
// command).
func (r *RestoreRequest) Validate() error {
	if len(r.StateGzip) == 0 {
		return fmt.Errorf("%w: restore: no state", api.ErrInvalid)
	}
	if len(r.StateGzip) > MaxRestoreSize {
		return fmt.Errorf("%w: restore: %d bytes of compressed state, more than %d", api.ErrInvalid, len(r.StateGzip), MaxRestoreSize)
	}
	return validateRequestID(r.RequestID)
}

// NewRestoreRequest compresses a snapshot stream into a RestoreRequest,
// after checking that it decodes (ReadState): a state that does not is
// refused here, at the edge, and never reaches the log. It returns the
// decoded state too. requestID may be "" (a restore that is not retried).
func NewRestoreRequest(stream []byte, requestID string) (*RestoreRequest, *State, error) {
	st, err := ReadState(bytes.NewReader(stream))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: restore: %v", api.ErrInvalid, err)
	}
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := gz.Write(stream); err != nil {
		return nil, nil, fmt.Errorf("restore: compress: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, nil, fmt.Errorf("restore: compress: %w", err)
	}
	r := &RestoreRequest{StateGzip: buf.Bytes(), RequestID: requestID}
	if err := r.Validate(); err != nil {
		return nil, nil, err
	}
	return r, st, nil
}

// PaddingCommand is an entry that changes nothing: it advances the log
// index, so that a restore of a backup from further along lands at an
// index its longest recency list fits below (see restamped). Flagged:
// binaries that do not know it skip it.
const PaddingCommand = IgnoreUnknownTypeFlag | 10

// PaddingRequest is a PaddingCommand.
type PaddingRequest struct{}

func (*PaddingRequest) CommandType() CommandType { return PaddingCommand }
func (*PaddingRequest) ID() string               { return "" }
func (*PaddingRequest) Validate() error          { return nil }

// restoredState decodes a RestoreRequest entry into the state it installs,
// as of the entry's index, with the restore's request ID recorded in it.
// A nil state leaves cur as it is: a retry of a restore cur already
// applied (its recorded result comes back), or a state that does not
// decode (decoding is deterministic: refused alike on every node).
func restoredState(cur *State, l *raft.Log) (*State, *ApplyResult) {
	cmd, err := DecodeCommand(l.Data)
	if err != nil {
		return nil, &ApplyResult{Index: l.Index, Err: fmt.Errorf("apply entry %d: %w", l.Index, err)}
	}
	req := cmd.(*RestoreRequest)
	if rec, ok := cur.requests.get(req.RequestID); req.RequestID != "" && ok {
		return nil, &ApplyResult{Index: rec.Index, Result: rec.Result, Duplicate: true}
	}
	gz, err := gzip.NewReader(bytes.NewReader(req.StateGzip))
	if err != nil {
		return nil, &ApplyResult{Index: l.Index, Err: fmt.Errorf("apply entry %d: restore: %w: %v", l.Index, api.ErrInvalid, err)}
	}
	s, err := ReadState(io.LimitReader(gz, 4<<30))
	if err != nil {
		return nil, &ApplyResult{Index: l.Index, Err: fmt.Errorf("apply entry %d: restore: %w", l.Index, err)}
	}
	if s.Index() > l.Index {
		// A backup from further along than this log (another cluster's,
		// or this one's before it was rebuilt): its indexes would be in
		// this log's future. Restamp it to end at this entry.
		rs, err := s.restamped(l.Index)
		if err != nil {
			return nil, &ApplyResult{Index: l.Index, Err: fmt.Errorf("apply entry %d: restore: %w", l.Index, err)}
		}
		s = rs
	}
	s = s.Rebased(l.Index)
	if req.RequestID != "" {
		s.requests.add(RequestRecord{ID: req.RequestID, Index: l.Index, Result: api.ResultRestored})
	}
	return s, &ApplyResult{Index: l.Index, Result: api.ResultRestored}
}

// LongestRecency is the length of s's longest recency list: a restore of
// s restamps it (see restamped) only at an index above it.
func (s *State) LongestRecency() int {
	n := 0
	s.types.Root().Walk(func(_ []byte, names *nameTree) bool {
		names.Root().Walk(func(_ []byte, r *recency) bool {
			n = max(n, r.Len())
			return false
		})
		return false
	})
	return n
}

// restamped returns s's contents as of index, for a state whose own index
// is not below it: each recency list, newest first, gets ModifyIndex
// index, index-1, ... (the order is what the indexes said; CreateIndex is
// set to the same), ACL tokens and the bootstrap are placed at index, and
// the window of request IDs is dropped (its indexes belong to the other
// history). A list longer than index-1 cannot be restamped: the edge
// pads the log first (cluster.Backend.SnapshotRestore).
func (s *State) restamped(index uint64) (*State, error) {
	if n := s.LongestRecency(); uint64(n) >= index {
		return nil, fmt.Errorf("%w: a recency list of %d instances cannot be placed below index %d", api.ErrInvalid, n, index)
	}
	types := iradix.New[*nameTree]().Txn()
	var (
		curType string
		names   *iradix.Txn[*recency]
	)
	flush := func() {
		if names != nil {
			types.Insert([]byte(curType), names.Commit())
		}
	}
	s.Walk(func(ptype, name string, list []*api.PluginInfo) bool {
		if names == nil || ptype != curType {
			flush()
			curType, names = ptype, iradix.New[*recency]().Txn()
		}
		out := make([]*api.PluginInfo, len(list))
		for j, p := range list {
			c := *p
			c.ModifyIndex = index - uint64(j)
			c.CreateIndex = c.ModifyIndex
			out[j] = &c
		}
		names.Insert([]byte(name), newRecency(out))
		return true
	})
	flush()
	var tokens []*ACLToken
	for _, t := range s.aclRecords() {
		c := *t
		c.CreateIndex = min(c.CreateIndex, index)
		tokens = append(tokens, &c)
	}
	boot := s.ACLBootstrapped()
	if boot > 0 {
		boot = min(boot, index)
	}
	acl, err := readACL(boot, tokens, index)
	if err != nil {
		return nil, err
	}
	t := types.Commit()
	return &State{types: t, nodes: buildNodeIndex(t), index: index, instances: s.instances, requests: newRequests(), acl: acl, interned: s.interned}, nil
}

// isRestore says whether a log entry is a RestoreCommand.
func isRestore(l *raft.Log) bool {
	return l.Type == raft.LogCommand && len(l.Data) > 0 && CommandType(l.Data[0]) == RestoreCommand
}
