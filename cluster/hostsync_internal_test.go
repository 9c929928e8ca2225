package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/gossip"
)

// commandsSince are the types of s's log entries after index, commands
// only (not the leader's no-op or configurations).
func commandsSince(t *testing.T, s *Server, index uint64) []fsm.CommandType {
	t.Helper()
	last, err := s.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var out []fsm.CommandType
	for i := index + 1; i <= last; i++ {
		var l raft.Log
		if err := s.logs.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if l.Type == raft.LogCommand {
			out = append(out, fsm.CommandType(l.Data[0]))
		}
	}
	return out
}

func lastIndex(t *testing.T, s *Server) uint64 {
	t.Helper()
	i, err := s.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// withOldServer runs f while the configuration holds a server that gossip
// does not know (as an older release's would be), when old.
func withOldServer(t *testing.T, s *Server, old bool, f func()) {
	t.Helper()
	if old {
		if err := s.raft.AddNonvoter("old", "127.0.0.1:1", 0, 10*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := s.raft.RemoveServer("old", 0, 10*time.Second).Error(); err != nil {
				t.Fatal(err)
			}
			s.oldest.Store(nil)
		}()
	}
	s.oldest.Store(nil) // what serverBelow remembers is a second old at most
	f()
}

// A host's sync reaches the log as one fsm.HostSyncCommand only while
// every server of the configuration says it applies it; with a server
// that does not, as the single writes a host made before (one entry per
// instance), with the same outcome: the same instances, and the same
// writes refused by their conditions (another node's instance, for a
// node-bound caller; a removal of an instance changed since it was read).
func TestHostSyncOnlyWhenEveryServerKnowsIt(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst := func(node, name, alloc, version string) *api.PluginInfo {
		return &api.PluginInfo{Type: "csi", Name: name, AllocID: alloc, NodeID: node, Version: version,
			ConnectionInfo: &api.ConnectionInfo{Address: node + ":9000"}}
	}
	for i, phase := range []struct {
		name      string
		oldServer bool
		bound     bool
		want      []fsm.CommandType
	}{
		{"every server knows it", false, true, []fsm.CommandType{fsm.HostSyncCommand}},
		{"every server knows it, a caller bound to no node", false, false, []fsm.CommandType{fsm.HostSyncCommand}},
		// Another node's instance is refused on the replica, before
		// it is proposed (registerRequest).
		{"an older server remains", true, true, slices.Repeat([]fsm.CommandType{fsm.RegisterCommand}, 5)},
		{"an older server remains, a caller bound to no node", true, false, slices.Repeat([]fsm.CommandType{fsm.RegisterCommand}, 6)},
	} {
		t.Run(phase.name, func(t *testing.T) {
			host := fmt.Sprint("host", i)
			other := "other-" + host
			// Another node holds alloc "taken" of name p0; the host
			// holds a stale instance it read at one index and one
			// changed since.
			if _, err := s.register(ctx, inst(other, "p0", "taken", "1")); err != nil {
				t.Fatal(err)
			}
			stale, err := s.register(ctx, inst(host, "gone", host+"-a", "1"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.register(ctx, inst(host, "gone", host+"-b", "1")); err != nil {
				t.Fatal(err)
			}
			changed, err := s.register(ctx, inst(host, "gone", host+"-b", "2"))
			if err != nil {
				t.Fatal(err)
			}
			req := api.HostSyncRequest{NodeID: host, Deregister: []api.HostDeregistration{
				{Type: "csi", Name: "gone", AllocID: host + "-a", IfModifyIndex: stale.Index},
				{Type: "csi", Name: "gone", AllocID: host + "-b", IfModifyIndex: changed.Index - 1},
			}}
			for i := range 5 {
				req.Register = append(req.Register, inst(host, fmt.Sprint("p", i), host, "1"))
			}
			req.Register = append(req.Register, inst(host, "p0", "taken", "1"))
			wctx := ctx
			if phase.bound {
				wctx = backend.WithIfNodeID(ctx, host)
			}
			var from uint64
			var res api.HostSyncResult
			withOldServer(t, s, phase.oldServer, func() {
				from = lastIndex(t, s)
				if res, err = s.Backend().SyncHost(wctx, req); err != nil {
					t.Fatalf("host sync: %v", err)
				}
			})
			want := slices.Clone(phase.want)
			if phase.oldServer {
				// 6 registrations, then the 2 conditional
				// deregistrations, in msgpack (no server skipped
				// protobuf there).
				want = append(want, fsm.ConditionalDeregisterCommand, fsm.ConditionalDeregisterCommand)
			}
			if got := commandsSince(t, s, from); !slices.Equal(got, want) {
				t.Errorf("entries %v, want %v", got, want)
			}
			wantRefused := []int{7} // the removal of the changed instance
			if phase.bound {
				wantRefused = []int{5, 7} // and another node's instance
			}
			if !slices.Equal(res.Refused, wantRefused) {
				t.Errorf("refused %v, want %v", res.Refused, wantRefused)
			}
			st := s.fsm.State()
			if p := st.Instance("csi", "p0", "taken"); phase.bound != (p.NodeID == other) {
				t.Errorf("the instance of another node after the sync: on %s", p.NodeID)
			}
			if st.Instance("csi", "gone", host+"-a") != nil || st.Instance("csi", "gone", host+"-b") == nil {
				t.Errorf("removals: the stale one %v, the changed one %v", st.Instance("csi", "gone", host+"-a"), st.Instance("csi", "gone", host+"-b"))
			}
			for i := range 5 {
				if p := st.Instance("csi", fmt.Sprint("p", i), host); p == nil || p.NodeID != host {
					t.Errorf("p%d not registered: %+v", i, p)
				}
			}
		})
	}
}

// A bad sync writes nothing, whichever way it would have been written:
// it is checked whole before its first write.
func TestHostSyncRefusedWhole(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	good := &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a1", NodeID: "h1", ConnectionInfo: &api.ConnectionInfo{Address: "x"}}
	bad := good.Copy()
	bad.AllocID, bad.ConnectionInfo = "a2", nil
	for _, old := range []bool{false, true} {
		withOldServer(t, s, old, func() {
			from := lastIndex(t, s)
			_, err := s.Backend().SyncHost(ctx, api.HostSyncRequest{NodeID: "h1", Register: []*api.PluginInfo{good, bad}})
			if api.RefusalCode(err) == "" {
				t.Errorf("older server %v: %v, want a refusal", old, err)
			}
			if got := commandsSince(t, s, from); len(got) != 0 {
				t.Errorf("older server %v: wrote %v", old, got)
			}
		})
	}
}

// The leader's marks of 50 failed nodes are one entry, not 50, once every
// server applies batches (one per node before), and leave exactly the
// marks one entry per node left; so do their clearings.
func TestSuspectMarksBatched(t *testing.T) {
	const nodes = 50
	since := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	members := func(status gossip.Status) []gossip.Member {
		var out []gossip.Member
		for n := range nodes {
			name := fmt.Sprintf("h%02d", n)
			out = append(out, gossip.Member{Name: name, Status: status, Since: since, Meta: gossip.Meta{ID: name, Role: api.RoleClient}})
		}
		return out
	}
	type outcome struct {
		marks, clears []fsm.CommandType
		marked        []string // every instance's health, by key
	}
	run := func(t *testing.T, old bool) outcome {
		s := soloServer(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for n := range nodes {
			node := fmt.Sprintf("h%02d", n)
			req := api.HostSyncRequest{NodeID: node}
			for i := range 4 {
				req.Register = append(req.Register, &api.PluginInfo{Type: "csi", Name: fmt.Sprint("p", i), AllocID: node, NodeID: node,
					ConnectionInfo: &api.ConnectionInfo{Address: node}})
			}
			if _, err := s.Backend().SyncHost(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		var out outcome
		stop := make(chan struct{})
		marks := nodeMarks{}
		remember := func() {
			s.oldest.Store(nil)
			if old {
				// What serverBelow would learn from gossip of a server
				// of the release before: it marks health, one node per
				// entry. (A server gossip does not know, as the other
				// tests' "old", would stop the marks altogether.)
				s.oldest.Store(&oldestServer{id: "old", version: rpcVersionHostSync - 1, checked: time.Now().Add(time.Hour)})
			}
		}
		func() {
			remember()
			from := lastIndex(t, s)
			s.markNodes(stop, members(gossip.StatusFailed), marks)
			out.marks = commandsSince(t, s, from)
			if len(marks) != nodes {
				t.Errorf("%d nodes marked, want %d", len(marks), nodes)
			}
			st := s.fsm.State()
			st.Walk(func(_, _ string, list []*api.PluginInfo) bool {
				for _, p := range list {
					out.marked = append(out.marked, fmt.Sprintf("%s/%s %+v", p.Name, p.AllocID, p.Health))
				}
				return true
			})
			remember()
			from = lastIndex(t, s)
			s.markNodes(stop, members(gossip.StatusAlive), marks)
			out.clears = commandsSince(t, s, from)
			if len(marks) != 0 {
				t.Errorf("%d nodes still marked after they came back", len(marks))
			}
			if n := len(nodeMarksOf(s.fsm.State())); n != 0 {
				t.Errorf("%d nodes still marked in the state", n)
			}
		}()
		return out
	}
	batched, single := run(t, false), run(t, true)
	for _, c := range []struct {
		name string
		got  []fsm.CommandType
		want []fsm.CommandType
	}{
		{"marks, batched", batched.marks, []fsm.CommandType{fsm.NodeHealthBatchCommand}},
		{"clears, batched", batched.clears, []fsm.CommandType{fsm.NodeHealthBatchCommand}},
		{"marks, with an older server", single.marks, slices.Repeat([]fsm.CommandType{fsm.NodeHealthCommand}, nodes)},
		{"clears, with an older server", single.clears, slices.Repeat([]fsm.CommandType{fsm.NodeHealthCommand}, nodes)},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: entries %v, want %v", c.name, c.got, c.want)
		}
	}
	if len(batched.marked) != nodes*4 || !slices.Equal(batched.marked, single.marked) {
		t.Errorf("marks of one entry (%d):\n%v\nof one entry per node (%d):\n%v", len(batched.marked), batched.marked, len(single.marked), single.marked)
	}
}
