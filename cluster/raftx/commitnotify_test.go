package raftx

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestCommitNoticeRules drives the notifier through raft's in-memory
// transport and checks each notice a follower receives: it names only an
// entry the follower acknowledged holding, carries the leader's current
// term, and is not sent when raft already told the follower, when this
// node no longer leads, or after a new term until the follower acknowledged
// something in it.
func TestCommitNoticeRules(t *testing.T) {
	_, leaderTrans := raft.NewInmemTransport("leader")
	_, followerTrans := raft.NewInmemTransport("f1")
	leaderTrans.Connect("f1", followerTrans)
	defer leaderTrans.Close()
	defer followerTrans.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var leading atomic.Bool
	leading.Store(true)
	n := NewCommitNotifier(ctx, leaderTrans, raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader")}, leading.Load)
	defer func() { cancel(); n.Wait() }()

	got := make(chan *raft.AppendEntriesRequest, 16)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case rpc := <-followerTrans.Consumer():
				req := rpc.Command.(*raft.AppendEntriesRequest)
				got <- req
				rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true}, nil)
			}
		}
	}()
	// raftSent is an AppendEntries raft itself exchanged with f1.
	raftSent := func(term, prev, prevTerm, last, lastTerm, commit uint64) {
		req := &raft.AppendEntriesRequest{Term: term, PrevLogEntry: prev, PrevLogTerm: prevTerm, LeaderCommitIndex: commit}
		for i := prev + 1; i <= last; i++ {
			req.Entries = append(req.Entries, &raft.Log{Index: i, Term: lastTerm})
		}
		n.observe("f1", "f1", req, &raft.AppendEntriesResponse{Term: term, Success: true})
	}
	expect := func(step string, term, index, indexTerm uint64) {
		t.Helper()
		select {
		case req := <-got:
			if req.Term != term || req.PrevLogEntry != index || req.PrevLogTerm != indexTerm || req.LeaderCommitIndex != index || len(req.Entries) != 0 {
				t.Fatalf("%s: notice term %d prev %d/%d commit %d entries %d; want term %d prev %d/%d commit %d, no entries",
					step, req.Term, req.PrevLogEntry, req.PrevLogTerm, req.LeaderCommitIndex, len(req.Entries), term, index, indexTerm, index)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no notice", step)
		}
	}
	expectNone := func(step string) {
		t.Helper()
		select {
		case req := <-got:
			t.Fatalf("%s: unexpected notice prev %d commit %d", step, req.PrevLogEntry, req.LeaderCommitIndex)
		case <-time.After(200 * time.Millisecond):
		}
	}

	raftSent(2, 0, 0, 7, 2, 5) // f1 holds 1..7 and was told 5
	n.AppliedUpTo(10, 2)
	expect("applied 10, f1 holds 7", 2, 7, 2)
	n.AppliedUpTo(11, 2)
	expectNone("f1 was told 7 and holds nothing newer")

	raftSent(2, 7, 2, 11, 2, 11) // raft itself told f1 the commit 11
	n.AppliedUpTo(11, 2)
	expectNone("raft told f1 already")

	leading.Store(false)
	raftSent(2, 11, 2, 12, 2, 11)
	n.AppliedUpTo(12, 2)
	expectNone("not leading")

	leading.Store(true)
	raftSent(3, 0, 0, 0, 0, 0) // a heartbeat of a new term
	n.AppliedUpTo(13, 3)       // f1 acknowledged nothing in term 3 yet
	expectNone("new term, nothing acknowledged in it")
	raftSent(3, 12, 2, 13, 3, 12)
	expect("new term, f1 holds 13", 3, 13, 3)
}
