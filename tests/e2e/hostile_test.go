package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
	"github.com/plugreg/plugreg/transport"
)

// clusterView is what an attack must not change: the registry's plugins,
// the Raft configuration, the ACL tokens, and every member alive.
type clusterView struct {
	Plugins []string
	Peers   []string
	Tokens  []string
	Members []string
}

func viewOf(ctx context.Context, t *testing.T, op *client.Client) clusterView {
	t.Helper()
	var v clusterView
	types, _, err := op.Types(ctx, nil)
	if err != nil {
		t.Fatalf("types: %v", err)
	}
	for _, typ := range types {
		list, _, err := op.List(ctx, typ, nil)
		if err != nil && !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("list %s: %v", typ, err)
		}
		for _, p := range list {
			v.Plugins = append(v.Plugins, fmt.Sprintf("%s/%s/%s@%s m%d", p.Type, p.Name, p.AllocID, p.NodeID, p.ModifyIndex))
		}
	}
	if v.Peers, err = op.Peers(ctx); err != nil {
		t.Fatalf("peers: %v", err)
	}
	tokens, err := op.ACLTokens(ctx)
	if err != nil {
		t.Fatalf("tokens: %v", err)
	}
	for _, tok := range tokens {
		v.Tokens = append(v.Tokens, tok.AccessorID+" "+tok.Node)
	}
	members, err := op.Members(ctx)
	if err != nil {
		t.Fatalf("members: %v", err)
	}
	for _, m := range members {
		v.Members = append(v.Members, m.Name+" "+m.Status)
	}
	for _, s := range [][]string{v.Plugins, v.Peers, v.Tokens, v.Members} {
		sort.Strings(s)
	}
	return v
}

// TestHostileSuite runs a cluster as docs/security.md says (three server
// processes and two client agents: mutual TLS with -verify-server-hostname,
// gossip encryption, ACLs under default deny, an agent token bound to each
// host) and has a hostile peer try, from each position it may hold, what
// docs/security.md says it cannot do. Each attack must be refused, and
// the registry, the Raft configuration, the tokens and the membership must
// be as they were. PLUGREG_HOSTILE_BIN runs it against another build:
// against 945320c (before issue 25), 10 of the 14 attacks below got past
// the check that now refuses them, and a gossip claim took a voter's slot
// (docs/security.md).
func TestHostileSuite(t *testing.T) {
	ca := testpki.New(t, "cluster")
	srv, cli := ca.Server(""), ca.Client("")
	var raw [32]byte
	rand.Read(raw[:])
	key := base64.StdEncoding.EncodeToString(raw[:])
	secure := func(f testpki.Files) []string {
		return []string{"-tls-ca-file", ca.CAFile, "-tls-cert-file", f.Cert, "-tls-key-file", f.Key,
			"-verify-incoming", "-verify-server-hostname", "-encrypt", key, "-acl-enabled", "-acl-default-policy", "deny"}
	}
	cliTLS, err := tlsutil.ClientConfig(tlsutil.ClientOptions{CAFile: ca.CAFile, CertFile: cli.Cert, KeyFile: cli.Key})
	if err != nil {
		t.Fatal(err)
	}
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: os.Getenv("PLUGREG_HOSTILE_BIN"), ServerArgs: secure(srv), ClientTLS: cliTLS})
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.HTTP)
	}
	as := func(addr []string, token string) *client.Client {
		cl, err := client.New(client.Config{Addrs: addr, TLS: cliTLS, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	boot, err := as(addrs, "").ACLBootstrap(ctx)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	op := as(addrs, boot.SecretID)
	write := []api.ACLPolicy{{Kind: api.ACLWrite}}
	tok1, err1 := op.ACLAgentTokenCreate(ctx, "host-1", "agent host-1", write)
	tok2, err2 := op.ACLAgentTokenCreate(ctx, "host-2", "agent host-2", write)
	if errors.Is(err1, api.ErrInvalid) && os.Getenv("PLUGREG_HOSTILE_BIN") != "" {
		// A build before node-bound tokens: the agent token of
		// docs/security.md then.
		tok1, err1 = op.ACLTokenCreate(ctx, "agent", write)
		tok2, err2 = tok1, nil
	}
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	h1 := c.StartClient(t, "host-1", "127.0.0.1", append(secure(cli), "-acl-agent-token", tok1.SecretID, "-plugin-socket", "off")...)
	// host-2 serves the probe port too, as the chart's client agents do.
	probePort := strconv.Itoa(proctest.FreePorts(t, "127.0.0.1", 1)[0])
	h2 := c.StartClient(t, "host-2", "127.0.0.1", append(secure(cli), "-acl-agent-token", tok2.SecretID, "-plugin-socket", "off",
		"-probe-port", probePort)...)
	// Each host registers its own plugin through its own agent, with its
	// agent token: what the agents do for their hosts.
	plugin := func(node, alloc string) *api.PluginInfo {
		return &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: alloc, NodeID: node, ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}
	}
	c.Poll(t, "both hosts registering their own plugins", func() (bool, string) {
		_, e1 := as([]string{h1.HTTP}, tok1.SecretID).Register(ctx, plugin("host-1", "a1"))
		_, e2 := as([]string{h2.HTTP}, tok2.SecretID).Register(ctx, plugin("host-2", "b1"))
		return e1 == nil && e2 == nil, fmt.Sprint(e1, e2)
	})
	c.Poll(t, "every member alive", func() (bool, string) {
		ms, err := op.Members(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range ms {
			if m.Status != "alive" {
				return false, m.Name + " " + m.Status
			}
		}
		return len(ms) == 5, fmt.Sprintf("%d members", len(ms))
	})
	before := viewOf(ctx, t, op)
	raftAddrs := before.Peers

	// The hostile peer's positions.
	certConf, err := tlsutil.NewConfigurator(tlsutil.Config{CAFile: ca.CAFile, CertFile: cli.Cert, KeyFile: cli.Key,
		VerifyOutgoing: true, VerifyServerHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	rpc := transport.NewPool("127.0.0.1", 2*time.Second, certConf)
	defer rpc.Close()
	// refusedRPC asks every server (the leader among them) over the server
	// port.
	refusedRPC := func(method string, args interface{}, code string) error {
		for _, addr := range raftAddrs {
			var reply interface{}
			err := rpc.Call(ctx, addr, method, args, &reply)
			var re *api.WireError
			if !errors.As(err, &re) || re.Code != code {
				return fmt.Errorf("%s at %s: %v (reply %v), want %s", method, addr, err, reply, code)
			}
		}
		return nil
	}
	mint, err := fsm.EncodeCommand(&fsm.ACLTokenSetRequest{Token: fsm.ACLToken{AccessorID: "attacker",
		SecretHash: api.HashSecret("attacker-secret"), Policies: []api.ACLPolicy{{Kind: api.ACLOperator}}}})
	if err != nil {
		t.Fatal(err)
	}
	h1API := as([]string{h1.HTTP}, tok1.SecretID)
	httpStatus := func(method, url, token, origin, contentType, body string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, method, "https://"+url, strings.NewReader(body))
		req.Header.Set("X-Plugreg-Token", token)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cliTLS.Clone()}}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	wantStatus := func(want int) func(int, error) error {
		return func(got int, err error) error {
			if err != nil || got != want {
				return fmt.Errorf("status %d (%v), want %d", got, err, want)
			}
			return nil
		}
	}
	attacks := []attack{
		// A client certificate on the server port (TestServerOnlyRPCRefusesClientCertificates).
		{"client certificate", "propose an operator token through Apply", func() error {
			return refusedRPC("Apply", struct{ Cmd []byte }{mint}, api.CodePermissionDenied)
		}},
		{"client certificate", "propose it through ApplyBatch", func() error {
			return refusedRPC("ApplyBatch", struct{ Cmds [][]byte }{[][]byte{mint}}, api.CodePermissionDenied)
		}},
		{"client certificate", "make a server leave", func() error {
			return refusedRPC("Leave", struct{ ID string }{c.Servers[1].Node}, api.CodePermissionDenied)
		}},
		{"client certificate", "register over the agent RPC without a token", func() error {
			return refusedRPC(agentrpc.Register, &agentrpc.RegisterArgs{Plugin: plugin("host-9", "x1")}, api.CodePermissionDenied)
		}},
		{"client certificate", "a busy-loop heartbeat on an event stream", func() error {
			s, err := rpc.Stream(ctx, raftAddrs[0], agentrpc.Subscribe, &agentrpc.SubscribeArgs{Heartbeat: time.Nanosecond})
			if err == nil {
				var ev api.Event
				err = s.Recv(&ev)
				s.Close()
			}
			var re *api.WireError
			if !errors.As(err, &re) || re.Code != api.CodeInvalid {
				return fmt.Errorf("%v, want invalid", err)
			}
			return nil
		}},
		// Another host's agent token (TestNodeBoundAgentToken).
		{"host-1's agent token", "deregister host-2's plugins through host-1's agent", func() error {
			_, err := h1API.DeregisterNode(ctx, "host-2")
			return isErr(err, api.ErrPermissionDenied)
		}},
		{"host-1's agent token", "deregister host-2's instance at a server", func() error {
			_, err := as(addrs, tok1.SecretID).Deregister(ctx, "csi", "ebs", "b1")
			return isErr(err, api.ErrConflict)
		}},
		{"host-1's agent token", "register a plugin for host-2", func() error {
			_, err := h1API.Register(ctx, plugin("host-2", "b2"))
			return isErr(err, api.ErrPermissionDenied)
		}},
		{"host-1's agent token", "deregister host-2 over the agent RPC", func() error {
			return refusedRPC(agentrpc.DeregisterNode, &agentrpc.DeregisterNodeArgs{NodeID: "host-2", Token: tok1.SecretID}, api.CodePermissionDenied)
		}},
		{"host-1's agent token", "create itself an operator token", func() error {
			_, err := h1API.ACLTokenCreate(ctx, "mine", []api.ACLPolicy{{Kind: api.ACLOperator}})
			return isErr(err, api.ErrPermissionDenied)
		}},
		{"host-1's agent token", "restore a snapshot", func() error {
			_, err := h1API.SnapshotRestore(ctx, strings.NewReader("not an archive"))
			return isErr(err, api.ErrPermissionDenied)
		}},
		{"a made-up token", "read", func() error {
			_, _, err := as(addrs, "made-up").List(ctx, "csi", nil)
			return isErr(err, api.ErrPermissionDenied)
		}},
		// A page in a browser that holds the client certificate (TestCrossSiteRequestsRefused).
		{"a web page", "register with a text/plain body", func() error {
			return wantStatus(http.StatusForbidden)(httpStatus("POST", addrs[0]+"/v1/plugins", tok1.SecretID, "https://evil.example", "text/plain",
				`{"Type":"csi","Name":"ebs","AllocID":"p1","NodeID":"host-1","ConnectionInfo":{"SocketPath":"/s"}}`))
		}},
		{"a web page", "burn the ACL bootstrap", func() error {
			return wantStatus(http.StatusForbidden)(httpStatus("PUT", addrs[1]+"/v1/acl/bootstrap", "", "https://evil.example", "", ""))
		}},
	}
	h := &hostile{t: t, ctx: ctx, c: c, addrs: addrs, raftAddrs: raftAddrs, h1: h1, h2: h2, tok1: tok1.SecretID, tok2: tok2.SecretID,
		op: op, cliTLS: cliTLS, rpc: rpc, as: as, plugin: plugin, probe: net.JoinHostPort("127.0.0.1", probePort)}
	attacks = append(attacks, h.round3()...)
	attacks = append(attacks, defaultAgentAttacks(ctx, t, c.Bin)...)
	for _, a := range attacks {
		if err := a.try(); err != nil {
			t.Errorf("%s may %s: %v", a.who, a.what, err)
		} else {
			t.Logf("refused: %s: %s", a.who, a.what)
		}
	}

	// A gossip member with the key that claims to be a server, at its own
	// port (a client certificate) and at a real server's address under
	// another ID (TestGossipMemberCannotTakeAVoterSlot).
	kr, _, err := gossip.OpenKeyring(filepath.Join(t.TempDir(), gossip.KeyringFileName), key)
	if err != nil {
		t.Fatal(err)
	}
	fake, err := transport.Listen("127.0.0.1:0", transport.ServeRPC(ctx, func(_ context.Context, _ string, dec func(interface{}) error) (interface{}, error) {
		var none struct{}
		dec(&none)
		return api.RaftStats{ID: c.Servers[2].Node}, nil
	}, transport.ServeOptions{}), hclog.NewNullLogger(), certConf)
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	for i, claim := range []gossip.Meta{
		{ID: c.Servers[2].Node, RaftAddr: fake.Addr().String(), Role: api.RoleServer},
		{ID: "server-9", RaftAddr: raftAddrs[1], Role: api.RoleServer},
	} {
		m, err := gossip.Start(gossip.Config{NodeID: fmt.Sprintf("intruder-%d", i), BindAddr: "127.0.0.1", Fast: true,
			Logger: hclog.NewNullLogger(), Meta: claim, Encryption: gossip.Encryption{Keyring: kr}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Join([]string{c.Servers[0].Gossip}); err != nil {
			t.Fatalf("the intruder could not join gossip: %v", err)
		}
		defer func() { m.Leave(time.Second); m.Shutdown() }()
	}
	// Several reconcile rounds (every 2 s).
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		peers, err := op.Peers(ctx)
		if err == nil && !reflect.DeepEqual(sorted(peers), before.Peers) {
			t.Fatalf("a gossip member changed the Raft configuration: %v -> %v", before.Peers, peers)
		}
		time.Sleep(500 * time.Millisecond)
	}

	after := viewOf(ctx, t, op)
	after.Members = filterOut(after.Members, "intruder-")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the attacks changed the cluster:\nbefore %+v\nafter  %+v", before, after)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func filterOut(s []string, prefix string) []string {
	var out []string
	for _, v := range s {
		if !strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}
