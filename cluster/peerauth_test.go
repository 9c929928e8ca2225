package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
	"github.com/plugreg/plugreg/transport"
)

// The server port's internal methods (raw commands for the log, a
// server's removal, Raft's state, the peer list) answer servers only. A
// client agent's certificate, from the cluster's own CA, once proposed an
// ACLTokenSet through Apply and minted itself an operator token under
// default deny, or could remove every server with Leave; now each method
// refuses it before reading its arguments, and nothing changes. A server's
// certificate is still served.
func TestServerOnlyRPCRefusesClientCertificates(t *testing.T) {
	ca := testpki.New(t, "cluster")
	srv, cli := ca.Server(""), ca.Client("")
	conf := func(f testpki.Files, incoming bool) *tlsutil.Configurator {
		c, err := tlsutil.NewConfigurator(tlsutil.Config{CAFile: ca.CAFile, CertFile: f.Cert, KeyFile: f.Key,
			VerifyIncoming: incoming, VerifyOutgoing: true, VerifyServerHostname: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) { cfg.TLS = conf(srv, true) }})
	leader := c.Leader()
	before := leader.State().Index()
	servers, _ := leader.RaftConfiguration()

	mint, err := fsm.EncodeCommand(&fsm.ACLTokenSetRequest{Token: fsm.ACLToken{AccessorID: "attacker",
		SecretHash: "0000000000000000000000000000000000000000000000000000000000000000", Policies: []api.ACLPolicy{{Kind: api.ACLOperator}}}})
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		method string
		args   interface{}
	}{
		{"Apply", struct{ Cmd []byte }{mint}},
		{"ApplyBatch", struct{ Cmds [][]byte }{[][]byte{mint}}},
		{"Leave", struct{ ID string }{c.Followers()[0].Config.NodeID}},
		{"ReadIndex", struct{}{}},
		{"Renew", api.RenewRequest{Type: "csi", Name: "x", AllocID: "a"}}, // authorized at its edge: Agent.Renew is the client agents'
		{"RaftStats", struct{}{}},
		{"Peers", struct{}{}},
	}
	attacker := transport.NewPool("127.0.0.1", 2*time.Second, conf(cli, false))
	defer attacker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, call := range calls {
		t.Run("client certificate/"+call.method, func(t *testing.T) {
			var reply interface{}
			err := attacker.Call(ctx, leader.RaftAddr(), call.method, call.args, &reply)
			var re *api.WireError
			if !errors.As(err, &re) || re.Code != api.CodePermissionDenied {
				t.Fatalf("%s with a client certificate: %v (reply %v); want permission_denied", call.method, err, reply)
			}
		})
	}
	if st := leader.State(); st.Index() != before || len(st.ACLTokens()) != 0 {
		t.Fatalf("the state moved from %d to %d", before, st.Index())
	}
	if after, _ := leader.RaftConfiguration(); len(after) != len(servers) {
		t.Fatalf("the configuration changed: %v -> %v", servers, after)
	}

	// A server's certificate: served (Peers needs no leader).
	server := transport.NewPool("127.0.0.1", 2*time.Second, conf(srv, true))
	defer server.Close()
	var peers []string
	if err := server.Call(ctx, leader.RaftAddr(), "Peers", struct{}{}, &peers); err != nil || len(peers) != 3 {
		t.Fatalf("Peers with a server certificate: %v, %v", peers, err)
	}
}

// A stream's heartbeat is chosen by its client agent: below
// agentrpc.MinHeartbeat it is refused as invalid (1 ns was a busy loop on the
// server); zero (none) and the floor itself are served.
func TestSubscribeHeartbeatFloor(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	b := c.Nodes[0].Backend()
	for _, tc := range []struct {
		every time.Duration
		ok    bool
	}{{time.Nanosecond, false}, {agentrpc.MinHeartbeat - 1, false}, {0, true}, {agentrpc.MinHeartbeat, true}} {
		ctx, cancel := context.WithCancel(context.Background())
		_, _, err := b.Subscribe(ctx, nil, nil, tc.every)
		cancel()
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, api.ErrInvalid)) {
			t.Errorf("heartbeat %v: %v; want ok %v", tc.every, err, tc.ok)
		}
	}
}

// Every agent holds the gossip key, and a member's metadata is its own
// word: a client agent once announced itself as a server with a
// follower's node ID and an address of its own, and the leader moved that
// voter to it. The leader now asks the address for its node ID over the
// server port first: the attacker's port, with only a client certificate,
// fails the server-name check, and the configuration stays as it was; a
// claim to a new node ID fares the same.
func TestGossipMemberCannotTakeAVoterSlot(t *testing.T) {
	ca := testpki.New(t, "cluster")
	srv, cli := ca.Server(""), ca.Client("")
	conf := func(f testpki.Files) *tlsutil.Configurator {
		c, err := tlsutil.NewConfigurator(tlsutil.Config{CAFile: ca.CAFile, CertFile: f.Cert, KeyFile: f.Key,
			VerifyIncoming: true, VerifyOutgoing: true, VerifyServerHostname: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) { cfg.TLS = conf(srv) }})
	leader := c.Leader()
	victim := c.Followers()[0]
	before, _ := leader.RaftConfiguration()

	// The attacker's server port: it holds a client certificate and
	// answers RaftStats as the victim.
	h := func(_ context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		var none struct{}
		dec(&none)
		return api.RaftStats{ID: victim.Config.NodeID}, nil
	}
	port, err := transport.Listen("127.0.0.1:0", transport.ServeRPC(context.Background(), h, transport.ServeOptions{}), hclog.NewNullLogger(), conf(cli))
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	for _, id := range []string{victim.Config.NodeID, "n-new"} {
		m, err := gossip.Start(gossip.Config{NodeID: "attacker-" + id, BindAddr: "127.0.0.1", Fast: true, Logger: hclog.NewNullLogger(),
			Meta: gossip.Meta{ID: id, RaftAddr: port.Addr().String(), Role: api.RoleServer}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown()
		if _, err := m.Join([]string{leader.GossipAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	// Several reconcile rounds.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		after, _ := leader.RaftConfiguration()
		for _, s := range after {
			if string(s.Address) == port.Addr().String() {
				t.Fatalf("the leader gave the attacker's address a voter's slot as %s: %v -> %v", s.ID, before, after)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after, _ := leader.RaftConfiguration(); len(after) != len(before) {
		t.Fatalf("the configuration changed: %v -> %v", before, after)
	}
}

// Bootstrap asks the same proof. With -verify-server-hostname only a
// server's certificate answers at a voter's address, but which server is
// another matter: a gossip member (a client agent's key is enough) claims
// to be the missing third server "n3" at the address of a server that has
// not joined gossip yet (here a port with a server certificate that
// answers as node "y"). The two servers wait it out and bootstrap once the
// real third server arrives. Without the proof they bootstrapped with a
// voter "n3" that no server is, at y's address.
func TestGossipMemberCannotJoinTheFirstConfiguration(t *testing.T) {
	ca := testpki.New(t, "cluster")
	srv := ca.Server("")
	conf, err := tlsutil.NewConfigurator(tlsutil.Config{CAFile: ca.CAFile, CertFile: srv.Cert, KeyFile: srv.Key,
		VerifyIncoming: true, VerifyOutgoing: true, VerifyServerHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 2, testcluster.Options{NoLeaderWait: true, Modify: func(_ int, cfg *cluster.Config) {
		cfg.TLS, cfg.BootstrapExpect = conf, 3
	}})
	// Server y, not yet in gossip: no cluster, its own node ID.
	h := func(_ context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		var none struct{}
		dec(&none)
		if method == "Peers" {
			return []string{}, nil
		}
		return api.RaftStats{ID: "y"}, nil
	}
	y, err := transport.Listen("127.0.0.1:0", transport.ServeRPC(context.Background(), h, transport.ServeOptions{}), hclog.NewNullLogger(), conf)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	m, err := gossip.Start(gossip.Config{NodeID: "attacker", BindAddr: "127.0.0.1", Fast: true, Logger: hclog.NewNullLogger(),
		Meta: gossip.Meta{ID: "n3", RaftAddr: y.Addr().String(), Role: api.RoleServer}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Join([]string{c.Nodes[0].GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if cfg, _ := n.RaftConfiguration(); len(cfg) > 0 {
				t.Fatalf("%s bootstrapped with the attacker's claim: %v", n.Config.NodeID, cfg)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.Leave(time.Second)
	m.Shutdown()
	c.AddServer()
	leader := c.WaitForLeader()
	cfg, _ := leader.RaftConfiguration()
	if len(cfg) != 3 {
		t.Fatalf("first configuration: %v", cfg)
	}
	for _, s := range cfg {
		if s.ID == "n3" {
			t.Fatalf("the attacker's claim is in the first configuration: %v", cfg)
		}
	}
}
