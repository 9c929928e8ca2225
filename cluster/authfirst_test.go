package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
	"github.com/plugreg/plugreg/transport"
)

// secureServer starts one server as docs/security.md sets one up
// (certificates checked both ways, ACLs with default deny), bootstraps its
// ACLs, and returns it, its operator secret, and a pool holding a client
// agent's certificate.
func secureServer(t *testing.T) (*testcluster.Node, string, *transport.Pool) {
	t.Helper()
	ca := testpki.New(t, "cluster")
	conf := func(f testpki.Files, incoming bool) *tlsutil.Configurator {
		c, err := tlsutil.NewConfigurator(tlsutil.Config{CAFile: ca.CAFile, CertFile: f.Cert, KeyFile: f.Key,
			VerifyIncoming: incoming, VerifyOutgoing: true, VerifyServerHostname: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	srv := ca.Server("")
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true},
		Modify: func(_ int, cfg *cluster.Config) { cfg.TLS = conf(srv, true) }})
	n := c.Leader()
	req, _ := http.NewRequest("PUT", n.HTTPURL+"/v1/acl/bootstrap", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var boot api.ACLTokenSecret
	if err := json.NewDecoder(resp.Body).Decode(&boot); err != nil || boot.SecretID == "" {
		t.Fatalf("bootstrap: %d %v", resp.StatusCode, err)
	}
	pool := transport.NewPool("127.0.0.1", 2*time.Second, conf(ca.Client(""), false))
	t.Cleanup(pool.Close)
	return n, boot.SecretID, pool
}

// remoteCode is the code of a server's refusal ("" for none).
func remoteCode(err error) string {
	var re *api.WireError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// On the server port, a client agent's certificate and a 64 MiB argument
// without a token (or with an unknown one) under default deny: every
// method, the client agents' and the servers' own, refuses it before it
// decodes the argument, and the server takes in no memory in proportion
// (a restore's archive is refused before it is read; the other client-agent
// methods read at most their 1 MiB bound). Before, Operator.SnapshotRestore
// decoded the whole archive before it looked at the token, and a method
// refused without decoding had its argument decoded anyway, to keep the
// connection in step.
func TestEveryPortMethodRefusesBeforeDecoding(t *testing.T) {
	n, _, attacker := secureServer(t)
	agentMethods, serverMethods := cluster.PortMethods()
	slices.Sort(agentMethods)
	slices.Sort(serverMethods)
	if !slices.Contains(agentMethods, agentrpc.SnapshotRestore) || !slices.Contains(serverMethods, "ApplyBatch") {
		t.Fatalf("the port's methods: %v %v", agentMethods, serverMethods)
	}
	big := make([]byte, 64<<20)
	// What the process may allocate per call: far less than the argument
	// (decoded, it was 2 GiB). The test's own send of it counts too, and
	// under the race detector its TLS record buffers are not reused.
	bound := uint64(16 << 20)
	if raceEnabled {
		bound = 48 << 20
	}
	type call struct{ method, token string }
	var calls []call
	for _, m := range append(agentMethods, serverMethods...) {
		calls = append(calls, call{m, ""})
	}
	calls = append(calls, call{agentrpc.SnapshotRestore, "not-a-token"}, call{agentrpc.Register, "not-a-token"})
	for _, c := range calls {
		t.Run(c.method+"/token "+c.token, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ctx = transport.WithCallerToken(ctx, c.token)
			args := struct {
				Token   string
				Archive []byte
			}{c.token, big}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var reply interface{}
			err := attacker.Call(ctx, n.RaftAddr(), c.method, &args, &reply)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: %v; %d bytes allocated", c.method, err, allocated)
			switch code := remoteCode(err); code {
			case api.CodePermissionDenied, api.CodeACLNotFound, "too_large":
			default:
				t.Errorf("%s: %v (code %q); want a refusal", c.method, err, code)
			}
			if allocated > bound {
				t.Errorf("%s allocated %d bytes for a refused %d-byte argument", c.method, allocated, len(big))
			}
		})
	}
}

// What client agents send is still served: the caller's token in the
// request's header (this release's agents) and in the arguments alone
// (older agents: their writes keep working through an upgrade, but not a
// restore, whose archive is not read for a caller the header did not
// prove). A header and arguments that name different tokens are refused.
func TestAgentRPCTokenInHeaderAndArguments(t *testing.T) {
	n, root, pool := secureServer(t)
	archive, err := n.Backend().SnapshotSave(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	var saved strings.Builder
	if err := archive(&saved); err != nil {
		t.Fatal(err)
	}
	plugin := func(alloc string) *api.PluginInfo {
		return &api.PluginInfo{Type: "csi", Name: "x", AllocID: alloc, NodeID: "h1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}
	}
	for _, tc := range []struct {
		name, header, method string
		args                 interface{}
		code                 string // "" for served
	}{
		{"register, token in the header and the arguments", root, agentrpc.Register, &agentrpc.RegisterArgs{Plugin: plugin("1"), Token: root}, ""},
		{"register, token in the header alone", root, agentrpc.Register, &agentrpc.RegisterArgs{Plugin: plugin("2")}, ""},
		{"register, token in the arguments alone (an older agent)", "", agentrpc.Register, &agentrpc.RegisterArgs{Plugin: plugin("3"), Token: root}, ""},
		{"register, no token", "", agentrpc.Register, &agentrpc.RegisterArgs{Plugin: plugin("4")}, api.CodePermissionDenied},
		{"register, header and arguments differ", root, agentrpc.Register, &agentrpc.RegisterArgs{Plugin: plugin("5"), Token: "another"}, api.CodeInvalid},
		{"restore, token in the header", root, agentrpc.SnapshotRestore, &agentrpc.SnapshotRestoreArgs{Archive: []byte(saved.String()), Token: root}, ""},
		{"restore, token in the arguments alone (an older agent)", "", agentrpc.SnapshotRestore, &agentrpc.SnapshotRestoreArgs{Archive: []byte(saved.String()), Token: root}, api.CodePermissionDenied},
		{"token list, token in the arguments alone (an older agent)", "", agentrpc.ACLTokens, &agentrpc.ACLCallerArgs{Token: root}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var reply interface{}
			err := pool.Call(transport.WithCallerToken(ctx, tc.header), n.RaftAddr(), tc.method, tc.args, &reply)
			if code := remoteCode(err); code != tc.code || (tc.code == "" && err != nil) {
				t.Fatalf("%v (code %q); want code %q", err, code, tc.code)
			}
		})
	}
}
