package cluster

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
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

// blockingFSM parks Apply until release is closed, as a Raft goroutine
// parked forever would.
type blockingFSM struct {
	entered chan struct{}
	release chan struct{}
}

func (f *blockingFSM) Apply(*raft.Log) interface{} {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	<-f.release
	return nil
}
func (f *blockingFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (f *blockingFSM) Restore(io.ReadCloser) error         { return errors.New("no snapshots") }

// Shutdown is bounded even when a Raft goroutine never returns: it waits
// ShutdownTimeout, closes the network under Raft, waits again, then gives
// up and says so.
func TestStopRaftIsBoundedWhenRaftHangs(t *testing.T) {
	fsm := &blockingFSM{entered: make(chan struct{}, 1), release: make(chan struct{})}
	rc := raft.DefaultConfig()
	rc.LocalID = "solo"
	rc.Logger = hclog.NewNullLogger()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	store := raft.NewInmemStore()
	addr, trans := raft.NewInmemTransport("")
	r, err := raft.NewRaft(rc, fsm, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(fsm.release) // let the parked goroutine end, and Raft with it
		r.Shutdown().Error()
	}()
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "solo", Address: addr}}}).Error(); err != nil {
		t.Fatal(err)
	}
	for r.State() != raft.Leader {
		time.Sleep(10 * time.Millisecond)
	}
	r.Apply([]byte("x"), time.Second)
	<-fsm.entered // the FSM goroutine is now parked
	s := &Server{cfg: &Config{ShutdownTimeout: 100 * time.Millisecond}, logger: hclog.NewNullLogger(), raft: r}
	stopped, err := s.stopRaft()
	if stopped || !errors.Is(err, ErrShutdownAbandoned) {
		t.Fatalf("stopRaft with a parked goroutine: stopped %v, err %v; want abandoned", stopped, err)
	}
}
