// Package testpki makes throwaway PKIs for tests: a CA and certificates it
// signs, written to a test's temp dir, with tlsutil's own PKI code (the one
// `plugreg tls` uses), so tests exercise the certificates operators get.
package testpki

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/plugreg/plugreg/tlsutil"
)

// CA is a test CA and the dir its files go to.
type CA struct {
	t      testing.TB
	dir    string
	Pair   tlsutil.KeyPair
	CAFile string
	n      int
}

// New makes a CA named name in a fresh temp dir.
func New(t testing.TB, name string) *CA {
	t.Helper()
	kp, err := tlsutil.CreateCA(tlsutil.CAOptions{CommonName: name})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{t: t, dir: dir, Pair: kp, CAFile: filepath.Join(dir, name+"-ca.pem")}
	if err := kp.WriteFiles(ca.CAFile, filepath.Join(dir, name+"-ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	return ca
}

// Files are a certificate's and its key's paths.
type Files struct{ Cert, Key string }

// Server issues a server certificate for cluster ("" : the default).
func (ca *CA) Server(cluster string) Files {
	return ca.Issue(tlsutil.CertOptions{Server: true, ClusterName: cluster})
}

// Client issues a client certificate for cluster.
func (ca *CA) Client(cluster string) Files {
	return ca.Issue(tlsutil.CertOptions{ClusterName: cluster})
}

// Expired issues a server certificate that expired an hour ago.
func (ca *CA) Expired(cluster string) Files {
	return ca.Issue(tlsutil.CertOptions{Server: true, ClusterName: cluster, Now: time.Now().Add(-25 * time.Hour), Validity: 24 * time.Hour})
}

// Issue issues a certificate with o and writes it to new files.
func (ca *CA) Issue(o tlsutil.CertOptions) Files {
	ca.t.Helper()
	kp, err := tlsutil.CreateCert(ca.Pair, o)
	if err != nil {
		ca.t.Fatal(err)
	}
	ca.n++
	f := Files{Cert: filepath.Join(ca.dir, "cert"+strconv.Itoa(ca.n)+".pem"), Key: filepath.Join(ca.dir, "key"+strconv.Itoa(ca.n)+".pem")}
	if err := kp.WriteFiles(f.Cert, f.Key); err != nil {
		ca.t.Fatal(err)
	}
	return f
}
