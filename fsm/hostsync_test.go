package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"google.golang.org/protobuf/encoding/protowire"
)

// hostSync is node's sync of regs and deregs, conditional on the node
// when bound.
func hostSync(node string, bound bool, regs []*api.PluginInfo, deregs ...api.HostDeregistration) *HostSyncRequest {
	r := &HostSyncRequest{HostSyncRequest: api.HostSyncRequest{NodeID: node, Register: regs, Deregister: deregs}}
	if bound {
		r.IfNodeID = node
	}
	return r
}

// singleWrites are the entries a host wrote for r before HostSyncCommand:
// one registration per plugin (conditional when bound), one conditional
// deregistration per removal.
func singleWrites(r *HostSyncRequest) []Request {
	var out []Request
	for _, p := range r.Register {
		out = append(out, NewRegisterRequest(p.Copy(), "", r.IfNodeID))
	}
	for _, d := range r.Deregister {
		out = append(out, &ConditionalDeregisterRequest{Type: d.Type, Name: d.Name, AllocID: d.AllocID, IfNodeID: r.NodeID, IfModifyIndex: d.IfModifyIndex})
	}
	return out
}

// eventShapes are events without their indexes (one entry's events share
// one; the single writes' each have their own): type, instance, and the
// name's newest after it.
func eventShapes(evs []Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		cur := "-"
		if e.Current != nil {
			cur = e.Current.AllocID
		}
		out = append(out, fmt.Sprintf("%s %s/%s/%s@%s v=%s health=%v cur=%s", e.EventType, e.Info.Type, e.Info.Name, e.Info.AllocID, e.Info.NodeID, e.Info.Version, e.Info.Health != nil, cur))
	}
	return out
}

// contents are every instance of s, in recency order, without indexes.
func contents(s *State) []string {
	var out []string
	s.Walk(func(t, n string, list []*api.PluginInfo) bool {
		for _, p := range list {
			out = append(out, fmt.Sprintf("%s/%s/%s@%s v=%s addr=%s ttl=%s health=%+v", t, n, p.AllocID, p.NodeID, p.Version, p.ConnectionInfo.Address, p.TTL, p.Health))
		}
		return true
	})
	return out
}

// A host's sync in one entry applies exactly as its single writes did,
// one entry each: the same instances in the same order, the same events
// in the same order, and the same writes refused by their conditions
// (a registration of another node's instance by a node-bound host; a
// removal of an instance another node took over or that changed since
// the host read it), which change nothing.
func TestHostSyncAppliesAsItsSingleWrites(t *testing.T) {
	on := func(node, name, alloc, version string) *api.PluginInfo {
		p := onNode(plugin("csi", name, alloc), node)
		p.Version = version
		return p
	}
	host := func(version string) []*api.PluginInfo {
		var out []*api.PluginInfo
		for i := range 20 {
			out = append(out, on("h1", fmt.Sprintf("p%02d", i), "h1", version))
		}
		return out
	}
	// setup registers, as single entries, what the registry holds first.
	setup := []Request{
		reg(on("h1", "p00", "h1", "1")), reg(on("h1", "p01", "h1", "1")), reg(on("h1", "p02", "h1", "0")),
		reg(suspect(on("h1", "p03", "h1", "1"), "probe")),
		reg(on("h2", "p04", "h1", "1")), // h2 took h1's alloc over
		reg(on("h1", "gone", "a1", "1")), reg(on("h1", "gone", "a2", "1")), reg(on("h1", "gone", "a3", "1")),
		reg(on("h2", "gone", "a4", "1")),
		reg(leased(on("h1", "leased", "h1", "1"), time.Minute)),
	}
	cases := []struct {
		name        string
		req         *HostSyncRequest
		wantRefused []int
	}{
		{"a host's 20 plugins after a restart", hostSync("h1", true, host("1")), []int{4}},
		{"unbound: takes its alloc back, as a plain registration does", hostSync("h1", false, host("1")), nil},
		{"a new version of every plugin", hostSync("h1", true, host("2")), []int{4}},
		{"health alone changes in place", hostSync("h1", true, []*api.PluginInfo{on("h1", "p03", "h1", "1"), suspect(on("h1", "p00", "h1", "1"), "probe")}), nil},
		{"a lease added and one dropped", hostSync("h1", true, []*api.PluginInfo{leased(on("h1", "p00", "h1", "1"), time.Minute), on("h1", "leased", "h1", "1")}), nil},
		{"stale removals, each on its condition", hostSync("h1", true, nil,
			api.HostDeregistration{Type: "csi", Name: "gone", AllocID: "a1", IfModifyIndex: 6}, // as read: removed
			api.HostDeregistration{Type: "csi", Name: "gone", AllocID: "a2", IfModifyIndex: 3}, // changed since: refused
			api.HostDeregistration{Type: "csi", Name: "gone", AllocID: "a3"},                   // the node's: removed
			api.HostDeregistration{Type: "csi", Name: "gone", AllocID: "a4"},                   // h2's: refused
			api.HostDeregistration{Type: "csi", Name: "gone", AllocID: "a5"}),                  // absent: nothing
			[]int{1, 3}},
		{"registrations then removals", hostSync("h1", true, host("3")[:5],
			api.HostDeregistration{Type: "csi", Name: "gone", AllocID: "a1", IfModifyIndex: 6},
			api.HostDeregistration{Type: "csi", Name: "gone", AllocID: "a4", IfModifyIndex: 9}),
			[]int{4, 6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			batch, single := twinAppliers(t, setup)
			mark := len(batch.rec.events)
			res := batch.fsm.Apply(batch.entry(tc.req)).(*ApplyResult)
			if res.Err != nil {
				t.Fatalf("host sync: %v", res.Err)
			}
			var refused []int
			for i, req := range singleWrites(tc.req) {
				r := single.fsm.Apply(single.entry(req)).(*ApplyResult)
				switch {
				case errors.Is(r.Err, api.ErrConflict):
					refused = append(refused, i)
				case r.Err != nil:
					t.Fatalf("single write %d: %v", i, r.Err)
				}
			}
			if !slices.Equal(refused, tc.wantRefused) || !slices.Equal(res.Refused, tc.wantRefused) {
				t.Errorf("refused: one entry %v, single writes %v, want %v", res.Refused, refused, tc.wantRefused)
			}
			got, want := eventShapes(batch.rec.events[mark:]), eventShapes(single.rec.events[mark:])
			if !slices.Equal(got, want) {
				t.Errorf("events of one entry:\n  %s\nof the single writes:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			for _, e := range batch.rec.events[mark:] {
				if e.Index != batch.index {
					t.Errorf("event %s/%s at index %d, want the entry's %d", e.Info.Name, e.Info.AllocID, e.Index, batch.index)
				}
			}
			if got, want := contents(batch.fsm.State()), contents(single.fsm.State()); !slices.Equal(got, want) {
				t.Errorf("state after one entry:\n  %s\nafter the single writes:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			wantResult := ResultSynced
			if len(got) == 0 {
				wantResult = api.ResultUnchanged
			}
			if res.Result != wantResult {
				t.Errorf("result %q, want %q", res.Result, wantResult)
			}
		})
	}
}

// A sync that changes nothing is unchanged, emits nothing, and says so.
func TestHostSyncUnchanged(t *testing.T) {
	a := newApplier(t)
	p := onNode(plugin("csi", "ebs", "h1"), "h1")
	a.apply(reg(p.Copy()))
	mark := len(a.rec.events)
	res := a.apply(hostSync("h1", true, []*api.PluginInfo{p.Copy()}, api.HostDeregistration{Type: "csi", Name: "ebs", AllocID: "absent"}))
	if res.Result != api.ResultUnchanged || len(res.Refused) != 0 || res.Removed != 0 {
		t.Fatalf("got %+v", res)
	}
	if len(a.rec.events) != mark {
		t.Fatalf("events: %v", eventShapes(a.rec.events[mark:]))
	}
}

// A sync is checked where it is built and where it is decoded: bad
// writes, writes of another node, an instance twice, and more than one
// entry may carry are refused with a clear error, and nothing is
// proposed.
func TestHostSyncValidation(t *testing.T) {
	p := func(alloc string) *api.PluginInfo { return onNode(plugin("csi", "ebs", alloc), "h1") }
	many := func(n int) []*api.PluginInfo {
		out := make([]*api.PluginInfo, n)
		for i := range out {
			out[i] = p(fmt.Sprint("a", i))
		}
		return out
	}
	big := p("big")
	big.Options = map[string]string{"blob": strings.Repeat("x", 60<<10)}
	bigs := []*api.PluginInfo{}
	for i := range 11 {
		b := big.Copy()
		b.AllocID = fmt.Sprint("big", i)
		bigs = append(bigs, b)
	}
	cases := []struct {
		name string
		req  *HostSyncRequest
		want error
		say  string
	}{
		{"nothing to write", hostSync("h1", true, nil), api.ErrInvalid, "writes nothing"},
		{"no node", hostSync("", false, many(1)), api.ErrInvalid, "NodeID"},
		{"another node's plugin", hostSync("h1", true, []*api.PluginInfo{onNode(plugin("csi", "ebs", "a1"), "h2")}), api.ErrInvalid, `of node "h2"`},
		{"conditional on another node", &HostSyncRequest{HostSyncRequest: api.HostSyncRequest{NodeID: "h1", Register: many(1)}, IfNodeID: "h2"}, api.ErrInvalid, `conditional on node "h2"`},
		{"an instance twice", hostSync("h1", true, many(1), api.HostDeregistration{Type: "csi", Name: "ebs", AllocID: "a0"}), api.ErrInvalid, "written twice"},
		{"a bad plugin", hostSync("h1", true, []*api.PluginInfo{onNode(plugin("csi", "a/b", "a1"), "h1")}), api.ErrInvalid, "'/'"},
		{"a bad removal", hostSync("h1", true, nil, api.HostDeregistration{Type: "csi", Name: "ebs"}), api.ErrInvalid, "AllocID"},
		{"a name '.'", hostSync("h1", true, []*api.PluginInfo{onNode(plugin("csi", ".", "a1"), "h1")}), api.ErrInvalid, "'.'"},
		{"more writes than one entry carries", hostSync("h1", true, many(api.MaxHostSyncWrites+1)), api.ErrTooLarge, "at most 1000"},
		{"more bytes than one entry carries", hostSync("h1", true, bigs), api.ErrTooLarge, "bytes, at most"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeCommand(tc.req)
			if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.say) {
				t.Fatalf("encode: %v, want %v saying %q", err, tc.want, tc.say)
			}
		})
	}
	if _, err := EncodeCommand(hostSync("h1", true, many(api.MaxHostSyncWrites))); err != nil {
		t.Fatalf("a sync of %d writes: %v", api.MaxHostSyncWrites, err)
	}
}

// An entry built by hand past the bounds (a misbehaving peer's) is
// refused where it is decoded, before its plugins are: what is refused
// never applies, and is refused alike everywhere.
func TestHostSyncDecodingRefusesPastTheBounds(t *testing.T) {
	one, err := EncodeCommand(hostSync("h1", true, []*api.PluginInfo{onNode(plugin("csi", "ebs", "a1"), "h1")}))
	if err != nil {
		t.Fatal(err)
	}
	var field []byte // the entry's one plugin field, repeated below
	body := one[1:]
	eachField(body, func(num protowire.Number, v []byte, _ uint64) {
		if num == 3 {
			field = protowire.AppendTag(nil, 3, protowire.BytesType)
			field = protowire.AppendBytes(field, v)
		}
	}, hostSyncFields)
	cases := []struct {
		name  string
		entry []byte
		want  error
	}{
		{"1,001 plugins", append(append([]byte{}, one...), bytes.Repeat(field, api.MaxHostSyncWrites)...), api.ErrMalformed},
		{"one plugin twice", append(append([]byte{}, one...), field...), api.ErrInvalid},
		{"no node", append([]byte{byte(HostSyncCommand)}, field...), api.ErrInvalid},
		{"a truncated plugin", one[:len(one)-3], api.ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeCommand(tc.entry); !errors.Is(err, tc.want) {
				t.Fatalf("decode: %v, want %v", err, tc.want)
			}
			a := newApplier(t)
			res := a.fsm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: tc.entry}).(*ApplyResult)
			if res.Err == nil || a.fsm.State().Len() != 0 || len(a.rec.events) != 0 {
				t.Fatalf("applied: %+v, %d instances", res, a.fsm.State().Len())
			}
		})
	}
	got, err := DecodeCommand(one)
	if err != nil {
		t.Fatal(err)
	}
	if want := hostSync("h1", true, []*api.PluginInfo{onNode(plugin("csi", "ebs", "a1"), "h1")}); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

// The leader's marks of many nodes in one entry leave what one entry per
// node left, with the same events in the same order.
func TestNodeHealthBatchAppliesAsItsSingleMarks(t *testing.T) {
	since := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	mark := func(node string) NodeHealthRequest {
		return NodeHealthRequest{NodeID: node, Suspect: true, Reason: "node " + node + " failed in gossip", LastSeen: since}
	}
	clear := func(node string) NodeHealthRequest { return NodeHealthRequest{NodeID: node} }
	var setup []Request
	for n := range 5 {
		for i := range 4 {
			setup = append(setup, reg(onNode(plugin("csi", fmt.Sprint("p", i), fmt.Sprint("h", n)), fmt.Sprint("h", n))))
		}
	}
	setup = append(setup, reg(onNode(suspect(plugin("csi", "p9", "h0"), "probe"), "h0")), &NodeHealthRequest{NodeID: "h4", Suspect: true, Reason: "earlier", LastSeen: since})
	cases := []struct {
		name  string
		nodes []NodeHealthRequest
	}{
		{"three nodes fail", []NodeHealthRequest{mark("h0"), mark("h1"), mark("h2")}},
		{"one back, one failing, one without instances", []NodeHealthRequest{clear("h4"), mark("h3"), mark("none")}},
		{"a node already marked, by its probe too", []NodeHealthRequest{mark("h4"), mark("h0")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			batch, single := twinAppliers(t, setup)
			at := len(batch.rec.events)
			res := batch.apply(&NodeHealthBatchRequest{Nodes: tc.nodes})
			for i := range tc.nodes {
				single.apply(&tc.nodes[i])
			}
			got, want := eventShapes(batch.rec.events[at:]), eventShapes(single.rec.events[at:])
			if !slices.Equal(got, want) {
				t.Errorf("events of one entry:\n  %s\nof one per node:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			if got, want := contents(batch.fsm.State()), contents(single.fsm.State()); !slices.Equal(got, want) {
				t.Errorf("state after one entry:\n  %s\nafter one per node:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			if wantRes := map[bool]api.Result{true: ResultHealth, false: api.ResultUnchanged}[len(want) > 0]; res.Result != wantRes {
				t.Errorf("result %q, want %q", res.Result, wantRes)
			}
		})
	}
}

func TestNodeHealthBatchValidation(t *testing.T) {
	many := make([]NodeHealthRequest, MaxNodeHealthBatch+1)
	for i := range many {
		many[i] = NodeHealthRequest{NodeID: fmt.Sprint("h", i)}
	}
	cases := []struct {
		name  string
		nodes []NodeHealthRequest
		want  error
	}{
		{"no node", nil, api.ErrInvalid},
		{"a node twice", []NodeHealthRequest{{NodeID: "h1"}, {NodeID: "h1", Suspect: true, Reason: "r"}}, api.ErrInvalid},
		{"a bad node", []NodeHealthRequest{{NodeID: "h/1"}}, api.ErrInvalid},
		{"a clearing with a reason", []NodeHealthRequest{{NodeID: "h1", Reason: "r"}}, api.ErrInvalid},
		{"more nodes than one entry carries", many, api.ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := EncodeCommand(&NodeHealthBatchRequest{Nodes: tc.nodes}); !errors.Is(err, tc.want) {
				t.Fatalf("encode: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := EncodeCommand(&NodeHealthBatchRequest{Nodes: many[:MaxNodeHealthBatch]}); err != nil {
		t.Fatalf("a batch of %d nodes: %v", MaxNodeHealthBatch, err)
	}
}

// One entry of a host's 20 registrations costs no more memory than its 20
// single entries applied together: its writes share one transaction over
// the state's trees, as a batch's entries do (each registration copied
// its tree paths anew before: 40 % more allocations).
func TestHostSyncAllocatesNoMoreThanItsSingleWrites(t *testing.T) {
	f := New(nil)
	if err := f.Restore(io.NopCloser(bytes.NewReader(fleetSnapshot(t, 100)))); err != nil {
		t.Fatal(err)
	}
	base := f.State()
	encode := func(reqs ...Request) []*raft.Log {
		var logs []*raft.Log
		for i, req := range reqs {
			data, err := EncodeCommand(req)
			if err != nil {
				t.Fatal(err)
			}
			logs = append(logs, &raft.Log{Index: base.Index() + uint64(i+1), Type: raft.LogCommand, Data: data})
		}
		return logs
	}
	sync := newHostSync(7)
	var singles []Request
	for _, p := range sync.Register {
		singles = append(singles, NewRegisterRequest(p.Copy(), "", p.NodeID))
	}
	allocs := func(logs []*raft.Log) float64 {
		return testing.AllocsPerRun(20, func() {
			f.state.Store(base)
			f.ApplyBatch(logs)
		})
	}
	one, twenty := allocs(encode(sync)), allocs(encode(singles...))
	if one > twenty {
		t.Fatalf("one entry of 20 registrations: %.0f allocations; 20 entries applied together: %.0f", one, twenty)
	}
}

// twinAppliers are two appliers that have applied the same setup: one
// for a batched command, one for its one-by-one equivalent.
func twinAppliers(t *testing.T, setup []Request) (batch, single *applier) {
	t.Helper()
	batch, single = newApplier(t), newApplier(t)
	for _, req := range setup {
		batch.apply(req)
		single.apply(req)
	}
	return batch, single
}
