package raftx

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A heartbeat reaches raft's main loop (the transport's consumer), never
// a handler on the connection goroutine: raft's fast path raised the term
// there while the leader loop went on stamping entries with it
// (hashicorp/raft issue 695; see HeartbeatsInOrder).
func TestHeartbeatsReachTheMainLoop(t *testing.T) {
	newTrans := func() *raft.NetworkTransport {
		tr, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, time.Second, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	follower, leader := newTrans(), newTrans()
	var trans raft.Transport = HeartbeatsInOrder{follower}
	fast := make(chan raft.RPC, 1)
	trans.SetHeartbeatHandler(func(rpc raft.RPC) { fast <- rpc; rpc.Respond(&raft.AppendEntriesResponse{Term: 5}, nil) })

	done := make(chan error, 1)
	go func() {
		// What raft sends as a heartbeat: a term and a leader, nothing else.
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte(leader.LocalAddr())},
			Term: 5}
		var resp raft.AppendEntriesResponse
		done <- leader.AppendEntries("n2", follower.LocalAddr(), req, &resp)
	}()
	select {
	case rpc := <-trans.Consumer():
		rpc.Respond(&raft.AppendEntriesResponse{Term: 5}, nil)
	case <-fast:
		t.Fatal("the heartbeat went to the fast-path handler, beside raft's main loop")
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat arrived nowhere")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
