package main

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"

	"github.com/plugreg/plugreg/tlsutil"
)

// benchTLS is the -tls run's PKI: the measured plugreg cluster runs with
// mutual TLS everywhere (as docs/security.md sets it up), the baseline
// without, so plugreg/baseline is the cost of TLS.
type benchTLS struct {
	agentArgs []string
	client    *tls.Config
}

func newBenchTLS(dir string) (*benchTLS, error) {
	dir = filepath.Join(dir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := tlsutil.CreateCA(tlsutil.CAOptions{CommonName: "bench CA"})
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := ca.WriteFiles(caFile, filepath.Join(dir, "ca-key.pem")); err != nil {
		return nil, err
	}
	var ips []net.IP
	for i := 0; i < members; i++ {
		ips = append(ips, net.ParseIP(memberIP(i)))
	}
	issue := func(server bool, name string) (string, string, error) {
		kp, err := tlsutil.CreateCert(ca, tlsutil.CertOptions{Server: server, IPs: ips})
		if err != nil {
			return "", "", err
		}
		cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		return cert, key, kp.WriteFiles(cert, key)
	}
	srvCert, srvKey, err := issue(true, "server")
	if err != nil {
		return nil, err
	}
	cliCert, cliKey, err := issue(false, "client")
	if err != nil {
		return nil, err
	}
	tc, err := tlsutil.ClientConfig(tlsutil.ClientOptions{CAFile: caFile, CertFile: cliCert, KeyFile: cliKey})
	if err != nil {
		return nil, err
	}
	return &benchTLS{
		agentArgs: []string{"-tls-ca-file", caFile, "-tls-cert-file", srvCert, "-tls-key-file", srvKey,
			"-verify-incoming", "-verify-outgoing", "-verify-server-hostname"},
		client: tc,
	}, nil
}
