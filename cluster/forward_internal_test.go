package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/transport"
)

func soloServer(t *testing.T) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.BindAddr = "solo", t.TempDir(), "127.0.0.1"
	cfg.ServerPort, cfg.GossipPort, cfg.BootstrapExpect = 0, 0, 1
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { s.Shutdown(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("Shutdown hung")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !s.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("solo server never became leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

func registerCmd(t *testing.T, name, alloc string) []byte {
	t.Helper()
	cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: &api.PluginInfo{Type: "csi", Name: name, AllocID: alloc,
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/x.sock"}}})
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// An ApplyBatch answers every command as a single Apply would: a command
// that fails validation is rejected (and never reaches the log) while the
// others of its batch apply, in order. Over the real RPC, so the reply's
// wire form is what is tested.
func TestApplyBatchAnswersEachCommand(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := &applyBatchArgs{Cmds: [][]byte{
		registerCmd(t, "a", "1"),
		{byte(fsm.RegisterCommand), 0xc1}, // malformed
		registerCmd(t, "b", "1"),
		registerCmd(t, "a", "1"), // the first again: unchanged
		{0x7e},                   // unknown command type
	}}
	var reply applyBatchReply
	if err := s.pool.Call(ctx, s.raftAddr, rpcApplyBatch, args, &reply); err != nil {
		t.Fatal(err)
	}
	if len(reply.Replies) != len(args.Cmds) {
		t.Fatalf("%d replies to %d commands", len(reply.Replies), len(args.Cmds))
	}
	res := make([]fwdResult, len(reply.Replies))
	for i := range reply.Replies {
		res[i] = reply.Replies[i].result()
		if res[i].err != nil {
			t.Fatalf("command %d failed: %v", i, res[i].err)
		}
	}
	if res[0].res.Result != api.ResultRegistered || res[2].res.Result != api.ResultRegistered || res[3].res.Result != api.ResultUnchanged {
		t.Fatalf("results %v %v %v", res[0].res.Result, res[2].res.Result, res[3].res.Result)
	}
	if !(res[0].res.Index < res[2].res.Index && res[2].res.Index < res[3].res.Index) {
		t.Fatalf("indexes %d %d %d not in the batch's order", res[0].res.Index, res[2].res.Index, res[3].res.Index)
	}
	if !errors.Is(res[1].res.Err, api.ErrMalformed) || !errors.Is(res[4].res.Err, api.ErrUnknownCommand) {
		t.Fatalf("rejections: %v, %v", res[1].res.Err, res[4].res.Err)
	}
	// The rejected commands took no log entry between the others.
	if got := res[3].res.Index - res[0].res.Index; got != 2 {
		t.Fatalf("entries %d..%d for three applied commands", res[0].res.Index, res[3].res.Index)
	}
	// More commands than a batch may hold are refused whole.
	big := &applyBatchArgs{Cmds: make([][]byte, maxForwardBatch+1)}
	for i := range big.Cmds {
		big.Cmds[i] = registerCmd(t, "c", "1")
	}
	if err := s.pool.Call(ctx, s.raftAddr, rpcApplyBatch, big, &reply); err == nil {
		t.Fatal("an oversize batch was served")
	}
}

// A follower batches only to a leader whose gossip meta says it serves
// ApplyBatch; a server it does not know (or an older one, RPCVersion 0)
// gets single Apply calls.
func TestBatchesOnlyToServersThatServeThem(t *testing.T) {
	s := soloServer(t)
	if !s.servesBatches(s.raftAddr) {
		t.Fatal("a server of this version does not count as serving batches")
	}
	if s.servesBatches("127.0.0.1:1") {
		t.Fatal("an unknown server counts as serving batches")
	}
}

// Shutdown returns right after an election too: raft v1.7.3 may drop the
// new leader's barrier when it stops (its FSM goroutine returns with the
// batch still queued), and a leader loop that waited on the barrier alone
// hung Shutdown forever (found by the test above, which stops its server
// a few milliseconds after the election).
func TestShutdownRightAfterElection(t *testing.T) {
	for i := range 10 {
		s := soloServer(t)
		done := make(chan struct{})
		go func() { s.Shutdown(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Shutdown still running after 30s", i)
		}
	}
}

// A leader's not-applied timeout reaches the forwarding follower as not
// applied, through the Apply RPC's status and through one reply of a
// forwarded batch, so Server.Apply retries it. Before, the outcome was
// recomputed from the code ("timeout": unknown) and the follower gave up.
func TestLeaderTimeoutReachesAFollowerAsNotApplied(t *testing.T) {
	s := soloServer(t)
	leaderSays := notApplied(api.CodeTimeout, context.DeadlineExceeded)
	h := func(_ context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		var args applyArgs
		dec(&args)
		return nil, leaderSays
	}
	leader, err := transport.Listen("127.0.0.1:0", transport.ServeRPC(context.Background(), h, transport.ServeOptions{}), hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	cmd, _ := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: &api.PluginInfo{Type: "csi", Name: "a", AllocID: "1", NodeID: "n"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.forwardApply(ctx, leader.Addr().String(), cmd)
	var ce *api.Error
	if !errors.As(err, &ce) || ce.Code() != api.CodeTimeout || ce.Outcome() != api.NotApplied {
		t.Fatalf("through the Apply RPC: %v, want a not-applied timeout", err)
	}

	// One reply of a batch, encoded as the wire encodes it.
	var sent applyReply
	sent.fail(leaderSays)
	var b []byte
	if err := codec.NewEncoderBytes(&b, &codec.MsgpackHandle{}).Encode(&sent); err != nil {
		t.Fatal(err)
	}
	var got applyReply
	if err := codec.NewDecoderBytes(b, &codec.MsgpackHandle{}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if err := got.result().err; !errors.As(err, &ce) || ce.Code() != api.CodeTimeout || ce.Outcome() != api.NotApplied || err.Error() != leaderSays.Error() {
		t.Fatalf("through a batch reply: %v, want %v, not applied", err, leaderSays)
	}
}

// A registration with a TTL is refused, not applied, while a server of the
// configuration does not say it knows leases (it would apply the entry
// without its TTL); one without a TTL goes on.
func TestTTLRefusedWhileAServerLacksLeases(t *testing.T) {
	s := soloServer(t)
	if err := s.raft.AddNonvoter("old", "127.0.0.1:1", 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		with func(p *api.PluginInfo)
	}{
		{"a TTL", func(p *api.PluginInfo) { p.TTL = api.Duration(10 * time.Second) }},
		{"health", func(p *api.PluginInfo) {
			p.Health = &api.InstanceHealth{Status: api.HealthSuspect, Check: api.CheckProbe}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: tc.name, ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}
			tc.with(p)
			_, err := s.register(ctx, p)
			var coded api.Coded
			if !errors.As(err, &coded) || coded.Code() != api.CodeUnknownCommand || coded.Outcome() != api.NotApplied {
				t.Fatalf("register with %s beside an older server: %v, want unknown_command, not applied", tc.name, err)
			}
			if s.State().Instance("csi", "ebs", tc.name) != nil {
				t.Fatal("the refused registration is in the state")
			}
			p.TTL, p.Health = 0, nil
			if _, err := s.register(ctx, p); err != nil {
				t.Fatalf("register without %s: %v", tc.name, err)
			}
		})
	}
}
