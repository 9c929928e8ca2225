package transport

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
	"go.uber.org/goleak"
)

func configurator(t *testing.T, cfg tlsutil.Config) *tlsutil.Configurator {
	t.Helper()
	c, err := tlsutil.NewConfigurator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A server port with -verify-incoming and -verify-server-hostname admits
// RPC from any certificate of the cluster's CA, Raft only from a server
// certificate, and nothing else: no plaintext, no other CA, no expired
// certificate, no TLS without a certificate. An RPC handler learns whether
// its peer proved the server identity (PeerFrom): only a server
// certificate does.
func TestServerPortTLS(t *testing.T) {
	defer goleak.VerifyNone(t)
	ca, other := testpki.New(t, "cluster"), testpki.New(t, "other")
	srv := ca.Server("")
	serverTLS := configurator(t, tlsutil.Config{CAFile: ca.CAFile, CertFile: srv.Cert, KeyFile: srv.Key,
		VerifyIncoming: true, VerifyOutgoing: true, VerifyServerHostname: true})

	h := func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		var s string
		if err := dec(&s); err != nil {
			return nil, err
		}
		return fmt.Sprintf("%s:%s:server=%v", method, s, PeerFrom(ctx).Server), nil
	}
	m, err := Listen("127.0.0.1:0", ServeRPC(context.Background(), h, ServeOptions{}), hclog.NewNullLogger(), serverTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Raft connections the port accepts, answered by an echo.
	go func() {
		for {
			c, err := m.RaftLayer().Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	addr := m.Addr().String()

	client, expired, foreign := ca.Client(""), ca.Expired(""), other.Server("")
	cases := []struct {
		name          string
		tls           *tlsutil.Configurator // nil: plaintext
		rpcOK, raftOK bool
	}{
		{"server certificate", serverTLS, true, true},
		{"client certificate", configurator(t, tlsutil.Config{CAFile: ca.CAFile, CertFile: client.Cert, KeyFile: client.Key, VerifyOutgoing: true}), true, false},
		{"plaintext", nil, false, false},
		{"TLS without a certificate", configurator(t, tlsutil.Config{CAFile: ca.CAFile, VerifyOutgoing: true}), false, false},
		{"certificate of another CA", configurator(t, tlsutil.Config{CAFile: ca.CAFile, CertFile: foreign.Cert, KeyFile: foreign.Key, VerifyOutgoing: true}), false, false},
		{"expired certificate", configurator(t, tlsutil.Config{CAFile: ca.CAFile, CertFile: expired.Cert, KeyFile: expired.Key, VerifyOutgoing: true}), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool("127.0.0.1", time.Second, tc.tls)
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out string
			err := p.Call(ctx, addr, "Echo", "x", &out)
			want := fmt.Sprintf("Echo:x:server=%v", tc.raftOK)
			if tc.rpcOK && (err != nil || out != want) {
				t.Fatalf("RPC: %q, %v; want %q", out, err, want)
			}
			if !tc.rpcOK && err == nil {
				t.Fatalf("RPC answered (%q), want refused", out)
			}
			err = raftEcho(NewDialer("127.0.0.1", tc.tls), addr)
			if tc.raftOK && err != nil {
				t.Fatalf("raft: %v", err)
			}
			if !tc.raftOK && err == nil {
				t.Fatal("raft connection admitted, want refused")
			}
		})
	}
}

// raftEcho dials a Raft connection and checks that bytes come back.
func raftEcho(d *Dialer, addr string) error {
	c, err := d.dial(addr, protoRaft, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	_, err = io.ReadFull(c, b)
	return err
}

// An agent that verifies server hostnames refuses a server port whose
// certificate does not name server.<cluster>.plugreg, even from the right
// CA; one that verifies only the CA accepts it.
func TestOutgoingVerifiesTheServer(t *testing.T) {
	defer goleak.VerifyNone(t)
	ca := testpki.New(t, "cluster")
	notServer := ca.Client("") // signed by the CA, named client.global.plugreg
	srvTLS := configurator(t, tlsutil.Config{CAFile: ca.CAFile, CertFile: notServer.Cert, KeyFile: notServer.Key})
	m, err := Listen("127.0.0.1:0", ServeRPC(context.Background(), func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		return "ok", nil
	}, ServeOptions{}), hclog.NewNullLogger(), srvTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	srv := ca.Server("")
	for _, tc := range []struct {
		hostname bool
		ok       bool
	}{{false, true}, {true, false}} {
		c := configurator(t, tlsutil.Config{CAFile: ca.CAFile, CertFile: srv.Cert, KeyFile: srv.Key, VerifyOutgoing: true, VerifyServerHostname: tc.hostname})
		p := NewPool("127.0.0.1", time.Second, c)
		err := p.Call(context.Background(), m.Addr().String(), "X", "", new(string))
		p.Close()
		if (err == nil) != tc.ok {
			t.Errorf("verify-server-hostname=%v: %v, want ok=%v", tc.hostname, err, tc.ok)
		}
	}
	// Another cluster's server name is not this one's.
	c := configurator(t, tlsutil.Config{CAFile: ca.CAFile, VerifyServerHostname: true, ClusterName: "east"})
	if c.Config().ServerName() != "server.east.plugreg" || !c.DialsTLS() {
		t.Fatalf("server name %q, dials TLS %v", c.Config().ServerName(), c.DialsTLS())
	}
}

// Certificates are reloaded without a restart: after the files change and
// Reload, new connections present the new certificate.
func TestReloadTakesNewCertificates(t *testing.T) {
	defer goleak.VerifyNone(t)
	ca1, ca2 := testpki.New(t, "one"), testpki.New(t, "two")
	s1 := ca1.Server("")
	srvTLS := configurator(t, tlsutil.Config{CAFile: ca1.CAFile, CertFile: s1.Cert, KeyFile: s1.Key})
	m, err := Listen("127.0.0.1:0", ServeRPC(context.Background(), func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		return "ok", nil
	}, ServeOptions{}), hclog.NewNullLogger(), srvTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	call := func(caFile string) error {
		p := NewPool("127.0.0.1", time.Second, configurator(t, tlsutil.Config{CAFile: caFile, VerifyOutgoing: true}))
		defer p.Close()
		return p.Call(context.Background(), m.Addr().String(), "X", "", new(string))
	}
	if err := call(ca1.CAFile); err != nil {
		t.Fatalf("before reload: %v", err)
	}
	// The operator puts a certificate of CA two in the same files.
	kp2, err := tlsutil.CreateCert(ca2.Pair, tlsutil.CertOptions{Server: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := kp2.WriteFiles(s1.Cert, s1.Key); err != nil {
		t.Fatal(err)
	}
	if err := call(ca2.CAFile); err == nil {
		t.Fatal("the new certificate is served before Reload")
	}
	if err := srvTLS.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := call(ca2.CAFile); err != nil {
		t.Fatalf("after reload: %v", err)
	}
	if err := call(ca1.CAFile); err == nil {
		t.Fatal("the old certificate is still served after Reload")
	}
	// A reload from broken files fails and keeps what is in use.
	if err := writeFile(s1.Key, "not a key"); err != nil {
		t.Fatal(err)
	}
	if err := srvTLS.Reload(); err == nil {
		t.Fatal("reload of a broken key succeeded")
	}
	if err := call(ca2.CAFile); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
