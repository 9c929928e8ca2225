package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// Autopilot's verdict on one server, for each rule: Consul's, and the two
// that catch a follower the leader cannot replicate to. A follower that
// merely lags, or that looks ahead of leader figures taken before its
// own, stays healthy.
func TestUnhealthyReason(t *testing.T) {
	const threshold = 500 * time.Millisecond
	leader := &api.RaftStats{ID: "n1", Leader: true, Term: 5, LastIndex: 100, AppliedIndex: 100}
	follower := func(edit func(*api.RaftStats)) *api.RaftStats {
		st := &api.RaftStats{ID: "n2", Term: 5, LastContact: int64(20 * time.Millisecond), LastIndex: 100, AppliedIndex: 100}
		if edit != nil {
			edit(st)
		}
		return st
	}
	after := func(last uint64) *api.RaftStats {
		return &api.RaftStats{ID: "n1", Leader: true, Term: 5, LastIndex: last, AppliedIndex: last}
	}
	for _, tc := range []struct {
		name          string
		st, leader    *api.RaftStats
		after         *api.RaftStats
		serf          string
		lag           uint64
		want          string // in the reason; "" for healthy
		wantUnhealthy bool
	}{
		{name: "healthy follower", st: follower(nil), leader: leader, after: after(100), serf: "alive"},
		{name: "the leader", st: leader, leader: leader, after: after(100), serf: "alive"},
		{name: "lagging within bounds", st: follower(func(s *api.RaftStats) { s.LastIndex, s.AppliedIndex = 50, 40 }),
			leader: leader, after: after(100), serf: "alive", lag: api.MaxTrailingLogs},
		{name: "lagging too far", st: follower(nil), leader: leader, after: after(100), serf: "alive", lag: api.MaxTrailingLogs + 1,
			want: "251 entries behind the leader's log", wantUnhealthy: true},
		// Taken in the same round, the leader's last index may be below
		// what a follower has since applied; the later figure is not.
		{name: "ahead of the leader's first figures only", st: follower(func(s *api.RaftStats) { s.LastIndex, s.AppliedIndex = 110, 108 }),
			leader: leader, after: after(110), serf: "alive"},
		{name: "ahead of the leader's log", st: follower(func(s *api.RaftStats) { s.LastIndex, s.AppliedIndex = 140, 140 }),
			leader: leader, after: after(110), serf: "alive",
			want: "its applied state (index 140) is ahead of the leader's log (last index 110)", wantUnhealthy: true},
		{name: "ahead, the leader's second figures missing", st: follower(func(s *api.RaftStats) { s.LastIndex, s.AppliedIndex = 140, 140 }),
			leader: leader, serf: "alive"},
		// An uncommitted tail of an older term, not applied, is cut by
		// the leader's next entries: no sign of trouble.
		{name: "log ahead, state not", st: follower(func(s *api.RaftStats) { s.LastIndex = 140 }), leader: leader, after: after(110), serf: "alive"},
		{name: "one failed restore", st: follower(func(s *api.RaftStats) { s.RestoreFailures, s.RestoreError = 1, "x" }),
			leader: leader, after: after(100), serf: "alive"},
		{name: "failed restores", st: follower(func(s *api.RaftStats) { s.RestoreFailures, s.RestoreError = 3, "refused" }),
			leader: leader, after: after(100), serf: "alive",
			want: "it failed to install the leader's snapshot 3 times, its state unchanged since (last: refused)", wantUnhealthy: true},
		{name: "no contact for too long", st: follower(func(s *api.RaftStats) { s.LastContact = int64(threshold) }),
			leader: leader, after: after(100), serf: "alive", want: "last heard from the leader 500ms ago (at most 500ms)", wantUnhealthy: true},
		{name: "never heard from the leader", st: follower(func(s *api.RaftStats) { s.LastContact = -1 }),
			leader: leader, after: after(100), serf: "alive", want: "it never heard from the leader", wantUnhealthy: true},
		{name: "another term", st: follower(func(s *api.RaftStats) { s.Term = 4 }), leader: leader, after: after(100), serf: "alive",
			want: "in term 4, the leader in 5", wantUnhealthy: true},
		{name: "failed in gossip", st: follower(nil), leader: leader, after: after(100), serf: "failed", want: "gossip has it failed", wantUnhealthy: true},
		{name: "no leader", st: follower(nil), serf: "alive", want: "no server leads", wantUnhealthy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unhealthyReason(tc.st, tc.leader, tc.after, tc.serf, tc.lag, threshold)
			if (got != "") != tc.wantUnhealthy || !strings.Contains(got, tc.want) {
				t.Fatalf("reason %q; want unhealthy %v, with %q", got, tc.wantUnhealthy, tc.want)
			}
		})
	}
}

// A failed restore counts until the state changes or it is old.
func TestRestoreFailures(t *testing.T) {
	now := time.Now()
	refused := errors.New("refused")
	var r restoreFailures
	r.record(refused, 10, now)
	r.record(refused, 10, now.Add(time.Second))
	if n, e := r.report(10, now.Add(2*time.Second)); n != 2 || e != "refused" {
		t.Fatalf("two failures at 10: report %d %q", n, e)
	}
	if n, _ := r.report(11, now.Add(2*time.Second)); n != 0 {
		t.Fatalf("state advanced to 11: report %d failures; want 0", n)
	}
	if n, _ := r.report(10, now.Add(time.Second+restoreFailureMemory+time.Millisecond)); n != 0 {
		t.Fatalf("last failure older than %v: report %d failures; want 0", restoreFailureMemory, n)
	}
	r.record(refused, 12, now.Add(3*time.Second))
	if n, _ := r.report(12, now.Add(3*time.Second)); n != 1 {
		t.Fatalf("a failure after the state changed: report %d; want 1 (counting afresh)", n)
	}
	r.record(nil, 12, now.Add(4*time.Second))
	if n, _ := r.report(12, now.Add(4*time.Second)); n != 0 {
		t.Fatalf("after a restore that worked: report %d failures; want 0", n)
	}
}

// A real server counts the snapshots its FSM refuses (an older state than
// its own, as a follower ahead of its leader is sent) in the figures it
// gives autopilot, and stops counting once its state moves on.
func TestRaftStatsCountRefusedRestores(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Apply(ctx, registerCmd(t, "a", "1")); err != nil {
		t.Fatal(err)
	}
	snap, err := s.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var older memSnapshot
	if err := snap.Persist(&older); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, registerCmd(t, "b", "1")); err != nil {
		t.Fatal(err)
	}
	machine := &machine{fsm: s.fsm, onRestore: s.recordRestore}
	for range 2 {
		if err := machine.Restore(io.NopCloser(bytes.NewReader(older.Bytes()))); !errors.Is(err, fsm.ErrStaleSnapshot) {
			t.Fatalf("restore of an older snapshot: %v; want %v", err, fsm.ErrStaleSnapshot)
		}
	}
	if st := s.raftStats(); st.RestoreFailures != 2 || !strings.Contains(st.RestoreError, fsm.ErrStaleSnapshot.Error()) {
		t.Fatalf("raft stats after two refused restores: %d failures, %q", st.RestoreFailures, st.RestoreError)
	}
	if _, err := s.Apply(ctx, registerCmd(t, "c", "1")); err != nil {
		t.Fatal(err)
	}
	if st := s.raftStats(); st.RestoreFailures != 0 {
		t.Fatalf("raft stats once the state moved on: %d failures, %q; want none", st.RestoreFailures, st.RestoreError)
	}
}

// memSnapshot is a raft.SnapshotSink over memory.
type memSnapshot struct{ bytes.Buffer }

func (m *memSnapshot) ID() string    { return "mem" }
func (m *memSnapshot) Close() error  { return nil }
func (m *memSnapshot) Cancel() error { return nil }
