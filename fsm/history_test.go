package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// Any history of commands, every type with and without request IDs,
// leaves a state whose snapshot this binary reads back as the same state:
// FSMs restored from snapshots taken at random points, then fed the rest
// of the log (in random batches, where the first gets one entry at a
// time), answer every later entry alike, emit the same events and end in
// byte-identical snapshots. A snapshot that cannot be read back fails
// here, as one with an ACL token deletion carrying a request ID did.
func TestSnapshotOfAnyHistoryReadsBack(t *testing.T) {
	// Seconds under -race; PLUGREG_HISTORY_SEEDS=1000 runs more (done
	// for the change that added it: all passed).
	seeds := 20
	if n, err := strconv.Atoi(os.Getenv("PLUGREG_HISTORY_SEEDS")); err == nil {
		seeds = n
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			checkHistory(t, seed, 300)
		})
	}
}

// history makes random command entries from a small vocabulary, so that
// names, allocations, nodes, tokens and request IDs collide often.
type history struct {
	rng       *rand.Rand
	index     uint64
	noRestore bool // the other cluster's history: no restores in it
}

func (h *history) pick(xs ...string) string { return xs[h.rng.Intn(len(xs))] }

func (h *history) requestID() string {
	if h.rng.Intn(2) == 0 {
		return ""
	}
	return fmt.Sprintf("req-%d", h.rng.Intn(40)) // retries: the same ID again
}

func secretHash(n int) string {
	sum := sha256.Sum256([]byte(fmt.Sprint("secret", n)))
	return hex.EncodeToString(sum[:])
}

func (h *history) token() ACLToken {
	policies := [][]api.ACLPolicy{
		{{Kind: api.ACLOperator}},
		{{Kind: api.ACLWrite, Types: []string{"csi"}}},
		{{Kind: api.ACLRead, Types: []string{"dev*"}}, {Kind: api.ACLWrite, Types: []string{"csi"}}},
	}
	return ACLToken{AccessorID: h.pick("acc-1", "acc-2", "acc-3", "acc-4"), SecretHash: secretHash(h.rng.Intn(5)),
		Description: h.pick("", "ci"), Policies: policies[h.rng.Intn(len(policies))]}
}

// next returns the data of the next command entry; state is the primary
// FSM's current state (for restores of its own past and conditions that
// hold).
func (h *history) next(t *testing.T, state *State) []byte {
	t.Helper()
	var req Request
	typ, name := h.pick("csi", "device"), h.pick("ebs", "efs", "gpu")
	k := h.rng.Intn(100)
	if h.noRestore {
		k = h.rng.Intn(94)
	}
	switch {
	case k < 40:
		alloc := fmt.Sprint("a", h.rng.Intn(6))
		p := &api.PluginInfo{Type: typ, Name: name, AllocID: alloc, Version: h.pick("1.0.0", "1.1.0"), NodeID: h.pick("n1", "n2", "n3"),
			ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"}}
		if h.rng.Intn(4) == 0 {
			p.Options = map[string]string{"zone": h.pick("a", "b")}
		}
		if h.rng.Intn(3) == 0 {
			p.TTL = api.Duration([]time.Duration{time.Second, 30 * time.Second}[h.rng.Intn(2)])
		}
		req = NewRegisterRequest(p, h.requestID(), "")
		if h.rng.Intn(3) == 0 { // a node-bound caller's: often refused
			req = NewRegisterRequest(p, h.requestID(), h.pick("n1", "n2"))
		}
		if h.rng.Intn(5) == 0 { // a host's sync: often partly refused
			req = h.hostSync(p, state)
		}
	case k < 51:
		// A lessor's batch: instances of the state at their index (or at
		// a stale one: a re-registration won), and one that is gone.
		e := &ExpireRequest{}
		for _, p := range state.Instances(typ, name) {
			if h.rng.Intn(2) == 0 {
				e.Leases = append(e.Leases, ExpiredLease{Type: p.Type, Name: p.Name, AllocID: p.AllocID, ModifyIndex: max(1, p.ModifyIndex-uint64(h.rng.Intn(2)))})
			}
		}
		e.Leases = append(e.Leases, ExpiredLease{Type: typ, Name: name, AllocID: "gone", ModifyIndex: 1})
		req = e
	case k < 55:
		req = &DeregisterRequest{Type: typ, Name: name, AllocID: fmt.Sprint("a", h.rng.Intn(6)), RequestID: h.requestID()}
	case k < 63:
		c := &ConditionalDeregisterRequest{Type: typ, Name: name, AllocID: fmt.Sprint("a", h.rng.Intn(6)), RequestID: h.requestID()}
		if h.rng.Intn(2) == 0 {
			c.IfNodeID = h.pick("n1", "n2")
		}
		if list := state.Instances(typ, name); len(list) > 0 && h.rng.Intn(2) == 0 {
			c.IfModifyIndex = list[h.rng.Intn(len(list))].ModifyIndex
			c.AllocID = list[0].AllocID
		} else if c.IfNodeID == "" {
			c.IfModifyIndex = 1 + uint64(h.rng.Intn(int(h.index)+1))
		}
		req = c
	case k < 68:
		req = &DeregisterNodeRequest{NodeID: h.pick("n1", "n2", "n3"), RequestID: h.requestID()}
	case k < 71:
		tok := h.token()
		tok.Policies = []api.ACLPolicy{{Kind: api.ACLOperator}}
		req = &ACLBootstrapRequest{Token: tok, RequestID: h.requestID()}
	case k < 80:
		req = &ACLTokenSetRequest{Token: h.token(), RequestID: h.requestID()}
	case k < 88:
		req = &ACLTokenDeleteRequest{AccessorID: h.pick("acc-1", "acc-2", "acc-3", "acc-4"), RequestID: h.requestID()}
	case k < 91:
		req = &PaddingRequest{}
	case k < 92:
		req = &StateCheckRequest{Node: "n1"}
	case k < 94:
		// A command type a newer release added, flagged as skippable.
		return []byte{byte(IgnoreUnknownTypeFlag | 0x33), 0x80}
	default:
		// A restore of this cluster's own state (its past, as a backup
		// taken earlier would be) or of another cluster's, further along.
		var buf bytes.Buffer
		src := state
		if h.rng.Intn(2) == 0 {
			other := &history{rng: rand.New(rand.NewSource(h.rng.Int63())), index: h.index, noRestore: true}
			o := New(nil)
			for i := 0; i < 30; i++ {
				other.index++
				o.Apply(&raft.Log{Index: other.index + 500, Term: 1, Type: raft.LogCommand, Data: other.next(t, o.State())})
			}
			src = o.State()
		}
		if err := WriteState(&buf, src); err != nil {
			t.Fatalf("write the state to restore: %v", err)
		}
		r, _, err := NewRestoreRequest(buf.Bytes(), h.requestID())
		if err != nil {
			t.Fatalf("restore request: %v", err)
		}
		req = r
	}
	data, err := EncodeCommand(req)
	if err != nil {
		t.Fatalf("encode %T: %v", req, err)
	}
	return data
}

// hostSync is p's node's sync: p and its node's other allocs of p's name,
// and the removal of some of the node's instances of another name, as
// read (their ModifyIndex) or not.
func (h *history) hostSync(p *api.PluginInfo, state *State) *HostSyncRequest {
	r := &HostSyncRequest{HostSyncRequest: api.HostSyncRequest{NodeID: p.NodeID, Register: []*api.PluginInfo{p}}}
	for _, alloc := range []string{"a6", "a7"} {
		if h.rng.Intn(2) == 0 {
			q := p.Copy()
			q.AllocID = alloc
			r.Register = append(r.Register, q)
		}
	}
	for _, cur := range state.NodeInstances(h.pick("n1", "n2", "n3")) {
		if cur.Name == p.Name || h.rng.Intn(3) != 0 {
			continue
		}
		d := api.HostDeregistration{Type: cur.Type, Name: cur.Name, AllocID: cur.AllocID}
		if h.rng.Intn(2) == 0 {
			d.IfModifyIndex = cur.ModifyIndex
		}
		r.Deregister = append(r.Deregister, d)
	}
	if h.rng.Intn(2) == 0 {
		r.IfNodeID = r.NodeID
	}
	return r
}

// outcome is what an FSM answered for one entry, comparable across FSMs.
type outcome struct {
	Index     uint64
	Result    api.Result
	Removed   int
	Duplicate bool
	Err       string
	Refused   string
}

func outcomeOf(v interface{}) outcome {
	r := v.(*ApplyResult)
	o := outcome{Index: r.Index, Result: r.Result, Removed: r.Removed, Duplicate: r.Duplicate, Refused: fmt.Sprint(r.Refused)}
	if r.Err != nil {
		o.Err = r.Err.Error()
	}
	return o
}

func checkHistory(t *testing.T, seed int64, n int) {
	h := &history{rng: rand.New(rand.NewSource(seed))}
	primaryRec := &recorder{}
	primary := New(primaryRec)
	// Every FSM's digest at each state check it applies: they must agree
	// at each index, however the FSM batched what came before.
	digests := map[uint64][32]byte{}
	checked := 0
	recordDigests := func(f *FSM, who string) {
		f.OnStateCheck(func(s *State, check *StateCheckRequest) {
			if check == nil || check.Node != "n1" {
				t.Fatalf("seed %d: %s: the hook had check %+v", seed, who, check)
			}
			d, err := Digest(s)
			if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, who, err)
			}
			if want, ok := digests[s.Index()]; ok && want != d {
				t.Fatalf("seed %d: %s: digest at %d differs from the primary's", seed, who, s.Index())
			}
			digests[s.Index()] = d
			checked++
		})
	}
	recordDigests(primary, "the primary")
	type follower struct {
		fsm     *FSM
		rec     *recorder
		from    uint64 // the snapshot's index
		pending []*raft.Log
		events  int // primary's event count at the snapshot
	}
	var followers []*follower
	outcomes := map[uint64]outcome{}
	for i := 0; i < n; i++ {
		h.index++
		l := &raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: h.next(t, primary.State())}
		outcomes[l.Index] = outcomeOf(primary.Apply(l))
		for _, f := range followers {
			f.pending = append(f.pending, l)
		}
		if h.rng.Intn(25) == 0 || i == n-1 {
			// A snapshot, as raft would take one: this binary must read it.
			var buf bytes.Buffer
			if err := WriteState(&buf, primary.State()); err != nil {
				t.Fatalf("seed %d: snapshot at %d: %v", seed, h.index, err)
			}
			rec := &recorder{}
			f := &follower{fsm: New(rec), rec: rec, from: h.index, events: len(primaryRec.events)}
			recordDigests(f.fsm, fmt.Sprintf("the FSM restored at %d", h.index))
			if err := f.fsm.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
				t.Fatalf("seed %d: restore the snapshot at %d: %v", seed, h.index, err)
			}
			followers = append(followers, f)
		}
	}
	var want bytes.Buffer
	if err := WriteState(&want, primary.State()); err != nil {
		t.Fatal(err)
	}
	for _, f := range followers {
		for len(f.pending) > 0 {
			k := 1 + h.rng.Intn(len(f.pending))
			for j, v := range f.fsm.ApplyBatch(f.pending[:k]) {
				idx := f.pending[j].Index
				if o := outcomeOf(v); o != outcomes[idx] {
					t.Fatalf("seed %d: entry %d: the FSM restored at %d answers %+v, the primary %+v", seed, idx, f.from, o, outcomes[idx])
				}
			}
			f.pending = f.pending[k:]
		}
		if !reflect.DeepEqual(eventKeys(f.rec.events), eventKeys(primaryRec.events[f.events:])) {
			t.Fatalf("seed %d: the FSM restored at %d emitted other events than the primary after %d", seed, f.from, f.from)
		}
		var got bytes.Buffer
		if err := WriteState(&got, f.fsm.State()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("seed %d: the FSM restored at %d ends in another state than the primary", seed, f.from)
		}
	}
	if len(digests) > 0 && checked == len(digests) {
		t.Fatalf("seed %d: no state check was compared across FSMs", seed)
	}
}

// eventKeys are the events as comparable values.
func eventKeys(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		cur := ""
		if e.Current != nil {
			cur = fmt.Sprintf("%s@%d", e.Current.AllocID, e.Current.ModifyIndex)
		}
		out[i] = fmt.Sprintf("%d %s %s/%s/%s@%d node=%s cur=%s", e.Index, e.EventType, e.Info.Type, e.Info.Name, e.Info.AllocID, e.Info.ModifyIndex, e.Info.NodeID, cur)
	}
	return out
}
