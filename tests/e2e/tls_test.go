package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
)

// Three server processes and a client agent with -verify-incoming and
// -verify-server-hostname: Raft, RPC and HTTPS all run over mutual TLS; a
// plaintext client, a client without a certificate and one with another
// CA's certificate are refused and change nothing; SIGHUP reloads the
// certificates.
func TestAgentsWithMutualTLS(t *testing.T) {
	ca, other := testpki.New(t, "cluster"), testpki.New(t, "other")
	srv, cli, foreign := ca.Server(""), ca.Client(""), other.Client("")
	tlsArgs := func(f testpki.Files) []string {
		return []string{"-tls-ca-file", ca.CAFile, "-tls-cert-file", f.Cert, "-tls-key-file", f.Key,
			"-verify-incoming", "-verify-server-hostname"}
	}
	clientTLS := func(f *testpki.Files, caFile string) *tls.Config {
		o := tlsutil.ClientOptions{CAFile: caFile}
		if f != nil {
			o.CertFile, o.KeyFile = f.Cert, f.Key
		}
		c, err := tlsutil.ClientConfig(o)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := proctest.StartCluster(t, proctest.ClusterConfig{ServerArgs: tlsArgs(srv), ClientTLS: clientTLS(&cli, ca.CAFile)})
	host := c.StartClient(t, "host-1", "127.0.0.1", append(tlsArgs(cli), "-plugin-socket", "off")...)
	c.WaitReady(t) // a leader over TLS Raft; the client agent's reads over TLS RPC

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}
	if _, err := host.API.Register(ctx, p); err != nil {
		t.Fatalf("register through the client agent over TLS: %v", err)
	}

	addr := c.Servers[0].HTTP
	refused := []struct {
		name string
		cfg  client.Config
	}{
		{"plaintext", client.Config{Addrs: []string{"http://" + addr}}},
		{"no client certificate", client.Config{Addrs: []string{addr}, TLS: clientTLS(nil, ca.CAFile)}},
		{"another CA's certificate", client.Config{Addrs: []string{addr}, TLS: clientTLS(&foreign, ca.CAFile)}},
		{"server not verified by the client's CA", client.Config{Addrs: []string{addr}, TLS: clientTLS(&cli, other.CAFile)}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc.cfg.TLS}}
			cl, err := client.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			bad := *p
			bad.AllocID = "a2"
			_, err = cl.Register(ctx, &bad)
			if err == nil {
				t.Fatal("register accepted")
			}
			t.Logf("register refused: %v", err)
			if _, _, err := cl.List(ctx, "csi", nil); err == nil {
				t.Fatal("list answered")
			}
		})
	}
	// Nothing the refused clients sent was applied.
	list, _, err := c.Servers[1].API.List(ctx, "csi", nil)
	if err != nil || len(list) != 1 || list[0].AllocID != "a1" {
		t.Fatalf("after the refusals: %v, %v; want only a1", list, err)
	}

	// SIGHUP reloads the files, and the agent keeps serving (a failed
	// reload keeping the old files is transport's TestReloadTakesNewCertificates).
	s := c.Servers[2]
	if err := syscall.Kill(s.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	c.Poll(t, "the reload logged", func() (bool, string) {
		return strings.Contains(s.Log(), "SIGHUP: TLS certificates reloaded"), "no reload line yet"
	})
	if _, _, err := s.API.List(ctx, "csi", &client.QueryOptions{Stale: true}); err != nil && !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("after SIGHUP: %v", err)
	}
}
