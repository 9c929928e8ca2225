package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
)

// A node's server port opens before its Raft exists, and peers that still
// think it leads forward to it as soon as it is back. Every RPC must be
// answered "not ready" (not applied, so the caller retries) until then;
// before, ReadIndex dereferenced the nil raft and the node crashed.
func TestRPCBeforeRaftIsNotReady(t *testing.T) {
	s := &Server{cfg: DefaultConfig()} // as between transport.Listen and setupRaft
	methods := []string{rpcApply, rpcApplyBatch, rpcReadIndex, rpcPeers, rpcLeave}
	for _, m := range methods {
		t.Run(m, func(t *testing.T) {
			_, err := s.handleRPC(context.Background(), m, func(interface{}) error { return nil })
			var ce *api.Error
			if !errors.As(err, &ce) || ce.Code() != api.CodeStarting || ce.Outcome() != api.NotApplied || !errors.Is(err, ErrStarting) {
				t.Fatalf("%s before raft: got %v, want a not-applied %q error", m, err, api.CodeStarting)
			}
		})
	}
}

// Pipelined replication must be off: raft v1.7.3's pipeline can park a
// follower's replication forever (hashicorp/raft issue 612). The server's
// transport is built with raftx.NoPipelining.
func TestReplicationIsNotPipelined(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.BindAddr = "solo", t.TempDir(), "127.0.0.1"
	cfg.ServerPort, cfg.GossipPort, cfg.BootstrapExpect = 0, 0, 1
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	_, err = s.trans.AppendEntriesPipeline("peer", "127.0.0.1:1")
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: got %v, want %v", err, raft.ErrPipelineReplicationNotSupported)
	}
}

// A refusal keeps its identity across the forwarding RPC: the follower
// rebuilds the sentinel from the code, for every rejection the FSM makes.
func TestRejectionKeepsItsIdentityOverTheWire(t *testing.T) {
	for _, r := range []struct {
		code string
		err  error
	}{
		{"invalid", api.ErrInvalid}, {"too_large", api.ErrTooLarge}, {"malformed", api.ErrMalformed},
		{"unknown_command", api.ErrUnknownCommand}, {"conflict", api.ErrConflict},
	} {
		t.Run(r.code, func(t *testing.T) {
			reply := new(applyReply).reject(errors.Join(r.err, errors.New("detail")))
			got := rejection(reply.RejectedCode, reply.Rejected)
			if !errors.Is(got, r.err) {
				t.Fatalf("rebuilt %v (code %q), want errors.Is %v", got, reply.RejectedCode, r.err)
			}
		})
	}
	if got := rejection("", "old peer"); !errors.Is(got, api.ErrInvalid) {
		t.Fatalf("a reply without a code (older peer): %v, want ErrInvalid", got)
	}
	if got := rejection("from_the_future", "x"); errors.Is(got, api.ErrInvalid) || got.Error() == "" {
		t.Fatalf("an unknown code: %v", got)
	}
}
