package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// TestBatchMatchesSingleApply applies one random log (registers, updates,
// deregisters, node deregistrations, retried request IDs, enough IDs to
// evict from the window) once entry by entry and once in batches of
// random sizes, and wants byte-identical snapshots and identical results:
// the batch's radix transactions must not change what the state is.
func TestBatchMatchesSingleApply(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var logs []*raft.Log
	for i := 1; i <= RequestWindow+3000; i++ {
		var req Request
		id := fmt.Sprintf("req-%d", i)
		if rng.Intn(20) == 0 && i > 10 {
			id = fmt.Sprintf("req-%d", i-rng.Intn(10)-1) // a retry
		}
		switch k := rng.Intn(100); {
		case k < 70:
			req = &RegisterRequest{RequestID: id, Plugin: &api.PluginInfo{
				Type: fmt.Sprintf("t%d", rng.Intn(3)), Name: fmt.Sprintf("n%d", rng.Intn(50)), AllocID: fmt.Sprintf("a%d", rng.Intn(5)),
				Version: fmt.Sprintf("v%d", rng.Intn(2)), NodeID: fmt.Sprintf("node%d", rng.Intn(4)),
				ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"},
			}}
		case k < 98:
			req = &DeregisterRequest{RequestID: id, Type: fmt.Sprintf("t%d", rng.Intn(3)), Name: fmt.Sprintf("n%d", rng.Intn(50)), AllocID: fmt.Sprintf("a%d", rng.Intn(5))}
		default:
			req = &DeregisterNodeRequest{RequestID: id, NodeID: fmt.Sprintf("node%d", rng.Intn(4))}
		}
		b, err := EncodeCommand(req)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i), Type: raft.LogCommand, Data: b})
	}

	one, batched := New(nil), New(nil)
	var want, got []interface{}
	for _, l := range logs {
		want = append(want, one.Apply(l))
	}
	for i := 0; i < len(logs); {
		n := min(1+rng.Intn(200), len(logs)-i)
		got = append(got, batched.ApplyBatch(logs[i:i+n])...)
		i += n
	}
	for i := range want {
		w, g := want[i].(*ApplyResult), got[i].(*ApplyResult)
		if fmt.Sprint(*w) != fmt.Sprint(*g) {
			t.Fatalf("entry %d: single %+v, batched %+v", i+1, *w, *g)
		}
	}
	var a, b bytes.Buffer
	if err := WriteState(&a, one.State()); err != nil {
		t.Fatal(err)
	}
	if err := WriteState(&b, batched.State()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("snapshots differ: %d and %d bytes", a.Len(), b.Len())
	}
	if n, m := one.State().requests.len(), batched.State().requests.len(); n != m || n < RequestWindow/2 {
		t.Fatalf("windows hold %d and %d IDs", n, m)
	}
}
