package fsm

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/api"
)

// maxSnapshotACLTokens bounds the header's token count, so a hostile
// header cannot make the reader allocate for billions.
const maxSnapshotACLTokens = 1 << 20

// SnapshotVersion is the version of the snapshot stream WriteState writes.
const SnapshotVersion = 1

// RegistryState heads a snapshot stream. The stream is msgpack values one
// after another: this header, then Names NameList records in (Type, Name)
// order, then Requests RequestRecord records in index order (the window of
// recent request IDs), then nothing. Streaming by name list keeps memory flat for large
// registries; the fixed order makes equal states encode to equal bytes.
type RegistryState struct {
	Version   int
	Index     uint64 // the state's applied index
	Names     int    // NameList records that follow
	Instances int    // instances in all records together
	Requests  int    // RequestRecord records after the name lists
	// ACLTokens ACLToken records follow the request records, by
	// AccessorID; ACLBootstrapIndex is when ACLs were bootstrapped. Both
	// are left out when zero, so a registry without ACLs snapshots to the
	// same bytes as a binary without ACLs writes; a binary older than them reads
	// a snapshot with tokens as one with data after its last record, and
	// refuses it.
	ACLBootstrapIndex uint64 `codec:",omitempty"`
	ACLTokens         int    `codec:",omitempty"`
}

// NameList is one (Type, Name) and its recency list, newest first.
type NameList struct {
	Type      string
	Name      string
	Instances []*api.PluginInfo
}

// WriteState streams s to w in the snapshot format. It checks every record
// as ReadState will (checkRecord, checkRequestRecord, readACL) and fails
// with ErrBadSnapshot before writing one the reader would refuse: a
// snapshot is read back by this node after a restart and by every
// follower it is sent to, so one that cannot be read must fail when it is
// taken (raft then keeps the log and tries again later), not when it is
// needed. Once the reader refused a result the FSM records (an ACL token
// deletion's), and every snapshot taken in the next 65,536 requests was
// unreadable.
func WriteState(w io.Writer, s *State) error {
	bw := bufio.NewWriterSize(w, 64*1024)
	enc := codec.NewEncoder(bw, msgpackHandle)
	names := 0
	s.types.Root().Walk(func(_ []byte, t *nameTree) bool {
		names += t.Len()
		return false
	})
	tokens := s.aclRecords()
	if _, err := readACL(s.ACLBootstrapped(), tokens, s.index); err != nil {
		return fmt.Errorf("%w: would not read back: %v", ErrBadSnapshot, err)
	}
	hdr := RegistryState{Version: SnapshotVersion, Index: s.index, Names: names, Instances: s.instances, Requests: s.requests.len(),
		ACLBootstrapIndex: s.ACLBootstrapped(), ACLTokens: len(tokens)}
	if err := enc.Encode(&hdr); err != nil {
		return fmt.Errorf("write snapshot header: %w", err)
	}
	var err error
	s.Walk(func(t, n string, list []*api.PluginInfo) bool {
		rec := NameList{Type: t, Name: n, Instances: list}
		if cerr := checkRecord(&rec, s.index); cerr != nil {
			err = fmt.Errorf("%w: would not read back: %s/%s: %v", ErrBadSnapshot, t, n, cerr)
			return false
		}
		err = enc.Encode(&rec)
		return err == nil
	})
	if err != nil {
		return fmt.Errorf("write snapshot record: %w", err)
	}
	var prevReq uint64
	s.requests.walk(func(rec RequestRecord) bool {
		if cerr := checkRequestRecord(&rec, prevReq, s.index); cerr != nil {
			err = fmt.Errorf("%w: would not read back: %v", ErrBadSnapshot, cerr)
			return false
		}
		prevReq = rec.Index
		err = enc.Encode(&rec)
		return err == nil
	})
	if err != nil {
		return fmt.Errorf("write snapshot request record: %w", err)
	}
	for _, t := range tokens {
		if err := enc.Encode(t); err != nil {
			return fmt.Errorf("write snapshot ACL token: %w", err)
		}
	}
	return bw.Flush()
}

// ReadState decodes a snapshot stream and checks every invariant the FSM
// keeps: valid plugins, records in strictly increasing (Type, Name) order,
// no duplicate allocation in a list, newest first, indexes within the
// state's index, counts as the header says, nothing after the last record.
// Any violation is ErrBadSnapshot.
func ReadState(r io.Reader) (*State, error) {
	dec := codec.NewDecoder(bufio.NewReaderSize(r, 64*1024), msgpackHandle)
	var hdr RegistryState
	if err := dec.Decode(&hdr); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrBadSnapshot, err)
	}
	if hdr.Version != SnapshotVersion {
		return nil, fmt.Errorf("%w: version %d, this binary reads %d", ErrBadSnapshot, hdr.Version, SnapshotVersion)
	}
	if hdr.Names < 0 || hdr.Instances < hdr.Names || hdr.Requests < 0 || hdr.Requests > RequestWindow || hdr.ACLTokens < 0 || hdr.ACLTokens > maxSnapshotACLTokens {
		return nil, fmt.Errorf("%w: header counts %d names, %d instances", ErrBadSnapshot, hdr.Names, hdr.Instances)
	}
	types := iradix.New[*nameTree]().Txn()
	interned := newInterner()
	var (
		curType   string
		names     *iradix.Txn[*recency]
		prev      NameList
		instances int
	)
	flush := func() {
		if names != nil {
			types.Insert([]byte(curType), names.Commit())
		}
	}
	for i := 0; i < hdr.Names; i++ {
		var rec NameList
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrBadSnapshot, i, err)
		}
		if err := checkRecord(&rec, hdr.Index); err != nil {
			return nil, fmt.Errorf("%w: record %d (%s/%s): %v", ErrBadSnapshot, i, rec.Type, rec.Name, err)
		}
		if i > 0 && (rec.Type < prev.Type || rec.Type == prev.Type && rec.Name <= prev.Name) {
			return nil, fmt.Errorf("%w: record %d (%s/%s) out of order", ErrBadSnapshot, i, rec.Type, rec.Name)
		}
		for _, p := range rec.Instances {
			p.Options = interned.optionsOf(p.Options)
			interned.internStrings(p)
		}
		if names == nil || rec.Type != curType {
			flush()
			curType, names = rec.Type, iradix.New[*recency]().Txn()
		}
		names.Insert([]byte(rec.Name), newRecency(rec.Instances))
		instances += len(rec.Instances)
		if instances > hdr.Instances {
			return nil, fmt.Errorf("%w: more instances than the header's %d", ErrBadSnapshot, hdr.Instances)
		}
		prev = NameList{Type: rec.Type, Name: rec.Name}
	}
	flush()
	if instances != hdr.Instances {
		return nil, fmt.Errorf("%w: %d instances, header says %d", ErrBadSnapshot, instances, hdr.Instances)
	}
	reqs := newRequests()
	var prevReq uint64
	for i := 0; i < hdr.Requests; i++ {
		var rec RequestRecord
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("%w: request record %d: %v", ErrBadSnapshot, i, err)
		}
		if err := checkRequestRecord(&rec, prevReq, hdr.Index); err != nil {
			return nil, fmt.Errorf("%w: request record %d: %v", ErrBadSnapshot, i, err)
		}
		if _, dup := reqs.get(rec.ID); dup {
			return nil, fmt.Errorf("%w: request %q twice", ErrBadSnapshot, rec.ID)
		}
		reqs.add(rec)
		prevReq = rec.Index
	}
	tokens := make([]*ACLToken, 0, min(hdr.ACLTokens, 1024))
	for i := 0; i < hdr.ACLTokens; i++ {
		t := new(ACLToken)
		if err := dec.Decode(t); err != nil {
			return nil, fmt.Errorf("%w: ACL token %d: %v", ErrBadSnapshot, i, err)
		}
		tokens = append(tokens, t)
	}
	acl, err := readACL(hdr.ACLBootstrapIndex, tokens, hdr.Index)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	var extra interface{}
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the last record", ErrBadSnapshot)
	}
	t := types.Commit()
	return &State{types: t, nodes: buildNodeIndex(t), index: hdr.Index, instances: instances, requests: reqs, acl: acl, interned: interned}, nil
}

func checkRecord(rec *NameList, index uint64) error {
	if err := api.ValidateIdentifier("Type", rec.Type); err != nil {
		return err
	}
	if err := api.ValidateIdentifier("Name", rec.Name); err != nil {
		return err
	}
	if len(rec.Instances) == 0 {
		return errors.New("empty recency list")
	}
	seen := make(map[string]bool, len(rec.Instances))
	for j, p := range rec.Instances {
		if err := api.ValidatePlugin(p); err != nil {
			return err
		}
		if p.Type != rec.Type || p.Name != rec.Name {
			return fmt.Errorf("instance %d is %s/%s", j, p.Type, p.Name)
		}
		if seen[p.AllocID] {
			return fmt.Errorf("alloc %s twice", p.AllocID)
		}
		seen[p.AllocID] = true
		if p.CreateIndex == 0 || p.CreateIndex > p.ModifyIndex || p.ModifyIndex > index {
			return fmt.Errorf("alloc %s has indexes %d/%d past state index %d", p.AllocID, p.CreateIndex, p.ModifyIndex, index)
		}
		// No order of indexes is checked: a registration moves its
		// instance to the front with a new ModifyIndex, but a health
		// change gives it one in place (and a node's mark gives all of
		// the node's instances the same one), so the list's order is
		// its own, not its indexes'. The check that a list was in
		// strictly decreasing ModifyIndex refused every snapshot of a
		// state with a health change behind a name's front
		// (TestSnapshotAfterAHealthChangeBehindTheFront).
	}
	return nil
}
