package fsm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
)

func leased(p *api.PluginInfo, ttl time.Duration) *api.PluginInfo {
	p.TTL = api.Duration(ttl)
	return p
}

func expiry(leases ...ExpiredLease) *ExpireRequest { return &ExpireRequest{Leases: leases} }

func lease(ptype, name, alloc string, modifyIndex uint64) ExpiredLease {
	return ExpiredLease{Type: ptype, Name: name, AllocID: alloc, ModifyIndex: modifyIndex}
}

// An expiry removes an instance only while it is the leased registration
// its lease names: a re-registration, a deregistration or a registration
// without a TTL ordered before it wins. One entry expires a whole batch,
// one expired event per instance removed.
func TestExpire(t *testing.T) {
	type step struct {
		req     Request
		result  api.Result
		removed int
		events  string
	}
	cases := []struct {
		name      string
		steps     []step
		instances string // Instances("csi", "ebs") at the end
	}{
		{
			name: "a leased instance expires",
			steps: []step{
				{reg(leased(plugin("csi", "ebs", "a1"), 5*time.Second)), api.ResultRegistered, 0, "registered:a1@1>a1"},
				{reg(plugin("csi", "ebs", "a2")), api.ResultRegistered, 0, "registered:a2@2>a2"},
				{expiry(lease("csi", "ebs", "a1", 1)), ResultExpired, 1, "expired:a1@3>a2"},
			},
			instances: "a2@2",
		},
		{
			name: "a re-registration before the entry wins",
			steps: []step{
				{reg(leased(plugin("csi", "ebs", "a1"), 5*time.Second)), api.ResultRegistered, 0, "registered:a1@1>a1"},
				{reg(withVersion(leased(plugin("csi", "ebs", "a1"), 5*time.Second), "2")), api.ResultUpdated, 0, "updated:a1@2>a1"},
				{expiry(lease("csi", "ebs", "a1", 1)), api.ResultAbsent, 0, ""},
			},
			instances: "a1@2",
		},
		{
			name: "an instance registered again without a TTL has no lease to expire",
			steps: []step{
				{reg(leased(plugin("csi", "ebs", "a1"), 5*time.Second)), api.ResultRegistered, 0, "registered:a1@1>a1"},
				{reg(plugin("csi", "ebs", "a1")), api.ResultUpdated, 0, "updated:a1@2>a1"},
				{expiry(lease("csi", "ebs", "a1", 2)), api.ResultAbsent, 0, ""},
			},
			instances: "a1@2",
		},
		{
			name: "a deregistered instance is skipped",
			steps: []step{
				{reg(leased(plugin("csi", "ebs", "a1"), 5*time.Second)), api.ResultRegistered, 0, "registered:a1@1>a1"},
				{dereg("csi", "ebs", "a1"), api.ResultDeregistered, 1, "deregistered:a1@2>-"},
				{expiry(lease("csi", "ebs", "a1", 1)), api.ResultAbsent, 0, ""},
			},
		},
		{
			name: "one entry expires a batch; the instances that no longer match stay",
			steps: []step{
				{reg(leased(plugin("csi", "ebs", "a1"), 5*time.Second)), api.ResultRegistered, 0, "registered:a1@1>a1"},
				{reg(leased(plugin("csi", "ebs", "a2"), 5*time.Second)), api.ResultRegistered, 0, "registered:a2@2>a2"},
				{reg(leased(plugin("csi", "ebs", "a3"), 5*time.Second)), api.ResultRegistered, 0, "registered:a3@3>a3"},
				{reg(withVersion(leased(plugin("csi", "ebs", "a2"), 5*time.Second), "2")), api.ResultUpdated, 0, "updated:a2@4>a2"},
				{expiry(lease("csi", "ebs", "a3", 3), lease("csi", "ebs", "a2", 2), lease("csi", "ebs", "a1", 1), lease("csi", "ebs", "a1", 1)),
					ResultExpired, 2, "expired:a3@5>a2 expired:a1@5>a2"},
			},
			instances: "a2@4",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			for i, st := range tc.steps {
				before := len(a.rec.events)
				res := a.apply(st.req)
				if res.Result != st.result || res.Removed != st.removed {
					t.Fatalf("step %d: result %q removed %d, want %q %d", i, res.Result, res.Removed, st.result, st.removed)
				}
				if got := renderEvents(a.rec.events[before:]); got != st.events {
					t.Fatalf("step %d: events %q, want %q", i, got, st.events)
				}
			}
			if got := allocs(a.fsm.State().Instances("csi", "ebs")); got != tc.instances {
				t.Fatalf("instances %q, want %q", got, tc.instances)
			}
			if n := a.fsm.State().Len(); n != strings.Count(tc.instances, "@") {
				t.Fatalf("Len %d for instances %q", n, tc.instances)
			}
		})
	}
}

func TestExpireValidation(t *testing.T) {
	many := make([]ExpiredLease, MaxExpireBatch+1)
	for i := range many {
		many[i] = lease("csi", "ebs", "a1", 1)
	}
	cases := []struct {
		name string
		req  *ExpireRequest
		ok   bool
	}{
		{"one", expiry(lease("csi", "ebs", "a1", 1)), true},
		{"the most", expiry(many[:MaxExpireBatch]...), true},
		{"none", expiry(), false},
		{"too many", expiry(many...), false},
		{"no index", expiry(lease("csi", "ebs", "a1", 0)), false},
		{"bad name", expiry(lease("csi", "e/bs", "a1", 1)), false},
		{"no alloc", expiry(lease("csi", "ebs", "", 1)), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeCommand(tc.req)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, api.ErrInvalid)) {
				t.Fatalf("encode: %v (want ok=%v)", err, tc.ok)
			}
		})
	}
}

// A TTL is replicated state: in the entry, in the state, in snapshots,
// which read back byte-identical with it. A changed TTL is an update; the
// same TTL again changes nothing.
func TestTTLIsReplicatedState(t *testing.T) {
	a := newApplier(t)
	a.apply(reg(leased(plugin("csi", "ebs", "a1"), 30*time.Second)))
	a.apply(reg(plugin("csi", "ebs", "a2")))
	if res := a.apply(reg(leased(plugin("csi", "ebs", "a1"), 30*time.Second))); res.Result != api.ResultUnchanged {
		t.Fatalf("same TTL again: %s", res.Result)
	}
	if res := a.apply(reg(leased(plugin("csi", "ebs", "a1"), 10*time.Second))); res.Result != api.ResultUpdated {
		t.Fatalf("new TTL: %s", res.Result)
	}
	snap := a.snapshot()
	b := New(nil)
	if err := b.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if p := b.State().Instance("csi", "ebs", "a1"); p == nil || p.TTL != api.Duration(10*time.Second) {
		t.Fatalf("restored a1: %+v", p)
	}
	if p := b.State().Instance("csi", "ebs", "a2"); p == nil || p.TTL != 0 {
		t.Fatalf("restored a2: %+v", p)
	}
	var again bytes.Buffer
	if err := WriteState(&again, b.State()); err != nil || !bytes.Equal(again.Bytes(), snap) {
		t.Fatalf("snapshot with TTLs not byte-identical after a round trip (%v)", err)
	}
	var leasedAllocs []string
	b.State().WalkLeased(func(p *api.PluginInfo) bool { leasedAllocs = append(leasedAllocs, p.AllocID); return true })
	if strings.Join(leasedAllocs, " ") != "a1" {
		t.Fatalf("WalkLeased: %v", leasedAllocs)
	}
}

// An entry and a snapshot written before leases existed
// (testdata/*-v1.*, made by the release before them) decode with no TTL,
// and this binary encodes the same instances to the same bytes: a TTL of
// zero is left out of every encoding.
func TestBeforeLeasesDecodesWithoutTTL(t *testing.T) {
	entry, err := os.ReadFile("testdata/register-v1.entry")
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeCommand(entry)
	if err != nil {
		t.Fatal(err)
	}
	if p := req.(*RegisterRequest).Plugin; p.TTL != 0 || p.AllocID != "a1" || p.Options["k"] != "v" {
		t.Fatalf("decoded %+v", p)
	}
	if again, _ := EncodeCommand(req); !bytes.Equal(again, entry) {
		t.Fatalf("an entry without a TTL encodes differently now:\n%x\n%x", entry, again)
	}

	snap, err := os.ReadFile("testdata/state-v1.snap")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadState(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	if st.Len() != 3 {
		t.Fatalf("%d instances", st.Len())
	}
	st.Walk(func(_, _ string, list []*api.PluginInfo) bool {
		for _, p := range list {
			if p.TTL != 0 {
				t.Errorf("%s/%s/%s has TTL %s", p.Type, p.Name, p.AllocID, p.TTL)
			}
		}
		return true
	})
	var again bytes.Buffer
	if err := WriteState(&again, st); err != nil || !bytes.Equal(again.Bytes(), snap) {
		t.Fatalf("a snapshot without TTLs encodes differently now (%v)", err)
	}
}

// A TTL travels as msgpack's integer of nanoseconds (the JSON string form
// is for HTTP only).
func TestTTLEncodesAsNanoseconds(t *testing.T) {
	var buf bytes.Buffer
	if err := newTestEncoder(&buf).Encode(&api.PluginInfo{TTL: api.Duration(1500 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	// 0xd2: int32 1,500,000,000 after the key "TTL".
	if !bytes.Contains(buf.Bytes(), []byte("\xa3TTL\xd2\x59\x68\x2f\x00")) {
		t.Fatalf("encoded %x", buf.Bytes())
	}
}
