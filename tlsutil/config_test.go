package tlsutil_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
	"testing"

	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  tlsutil.Config
		ok   bool
	}{
		{"off", tlsutil.Config{}, true},
		{"cert without key", tlsutil.Config{CertFile: "c"}, false},
		{"key without cert", tlsutil.Config{KeyFile: "k"}, false},
		{"verify incoming without CA", tlsutil.Config{CertFile: "c", KeyFile: "k", VerifyIncoming: true}, false},
		{"verify incoming without cert", tlsutil.Config{CAFile: "ca", VerifyIncoming: true}, false},
		{"verify outgoing without CA", tlsutil.Config{VerifyOutgoing: true}, false},
		{"verify hostname without CA", tlsutil.Config{VerifyServerHostname: true}, false},
		{"everything", tlsutil.Config{CAFile: "ca", CertFile: "c", KeyFile: "k", VerifyIncoming: true, VerifyServerHostname: true}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate: %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, tlsutil.ErrConfig) {
				t.Fatalf("%v does not wrap ErrConfig", err)
			}
		})
	}
}

// Certificates carry the names and usages the policy checks.
func TestCertificateShapes(t *testing.T) {
	ca := testpki.New(t, "c")
	for _, tc := range []struct {
		server bool
		name   string
	}{{true, "server.east.plugreg"}, {false, "client.east.plugreg"}} {
		kp, err := tlsutil.CreateCert(ca.Pair, tlsutil.CertOptions{Server: tc.server, ClusterName: "east"})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(kp.CertPEM)
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(cert.DNSNames, tc.name) || !slices.Contains(cert.DNSNames, "localhost") || cert.Subject.CommonName != tc.name {
			t.Errorf("names %v (CN %s), want %s and localhost", cert.DNSNames, cert.Subject.CommonName, tc.name)
		}
		pool, err := tlsutil.LoadCAPool(ca.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: tc.name}); err != nil {
			t.Errorf("%s does not verify against its CA: %v", tc.name, err)
		}
	}
	// A leaf is not a CA: it cannot sign.
	kp, err := tlsutil.CreateCert(ca.Pair, tlsutil.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlsutil.CreateCert(kp, tlsutil.CertOptions{}); err == nil {
		t.Fatal("a leaf certificate signed another")
	}
}

func TestClientConfig(t *testing.T) {
	ca := testpki.New(t, "c")
	cl := ca.Client("")
	cfg, err := tlsutil.ClientConfig(tlsutil.ClientOptions{CAFile: ca.CAFile, CertFile: cl.Cert, KeyFile: cl.Key, ServerName: "server.global.plugreg"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.ServerName != "server.global.plugreg" || cfg.MinVersion == 0 {
		t.Fatalf("config %+v", cfg)
	}
	if _, err := tlsutil.ClientConfig(tlsutil.ClientOptions{CertFile: cl.Cert}); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
	if _, err := tlsutil.ClientConfig(tlsutil.ClientOptions{CAFile: cl.Key}); err == nil {
		t.Fatal("a key file was taken for a CA")
	}
}
