package tlsutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"github.com/plugreg/plugreg/internal/atomicfile"
)

// A small PKI for development and tests, with ECDSA P-256 keys: a CA, and
// server and client certificates it signs (`plugreg tls ca create`, `tls
// cert create`). Production PKIs (Vault, cert-manager, an enterprise CA)
// only need to produce certificates of the same shape: servers name
// ServerName, and every certificate is signed by the CA in -tls-ca-file.

// KeyPair is a certificate and its key, both PEM.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// CAOptions shape a new CA.
type CAOptions struct {
	CommonName string        // empty: "plugreg CA <serial>"
	Validity   time.Duration // zero: 5 years
	Now        time.Time     // zero: time.Now (tests make expired CAs)
}

// CreateCA makes a self-signed CA.
func CreateCA(o CAOptions) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return KeyPair{}, err
	}
	now, validity := orNow(o.Now), o.Validity
	if validity == 0 {
		validity = 5 * 365 * 24 * time.Hour
	}
	name := o.CommonName
	if name == "" {
		name = fmt.Sprintf("plugreg CA %x", serial.Bytes()[:4])
	}
	skid, err := keyID(key.Public())
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"plugreg"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		SubjectKeyId:          skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("create CA certificate: %w", err)
	}
	return encode(der, key)
}

// CertOptions shape a certificate signed by a CA.
type CertOptions struct {
	// Server: a server certificate (names ServerName, usable to serve and
	// to dial); otherwise a client certificate (names ClientName; client
	// agents serve HTTPS with it too, so it may serve as well).
	Server      bool
	ClusterName string
	DNSNames    []string // more names (always: localhost)
	IPs         []net.IP // more addresses (always: 127.0.0.1, ::1)
	Validity    time.Duration
	Now         time.Time
}

// CreateCert makes a certificate signed by ca.
func CreateCert(ca KeyPair, o CertOptions) (KeyPair, error) {
	caCert, caKey, err := parse(ca)
	if err != nil {
		return KeyPair{}, fmt.Errorf("CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return KeyPair{}, err
	}
	now, validity := orNow(o.Now), o.Validity
	if validity == 0 {
		validity = 365 * 24 * time.Hour
	}
	cfg := Config{ClusterName: o.ClusterName}
	name := cfg.ClientName()
	if o.Server {
		name = cfg.ServerName()
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: name},
		NotBefore:      now.Add(-time.Minute),
		NotAfter:       now.Add(validity),
		KeyUsage:       x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:       append([]string{name, "localhost"}, o.DNSNames...),
		IPAddresses:    append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, o.IPs...),
		AuthorityKeyId: caCert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return KeyPair{}, fmt.Errorf("create certificate: %w", err)
	}
	return encode(der, key)
}

func parse(kp KeyPair) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(kp.CertPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse certificate: %w", err)
	}
	kb, _ := pem.Decode(kp.KeyPEM)
	if kb == nil {
		return nil, nil, errors.New("no PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		ek, err2 := x509.ParseECPrivateKey(kb.Bytes)
		if err2 != nil {
			return nil, nil, fmt.Errorf("parse key: %w", err)
		}
		k = ek
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("key cannot sign")
	}
	if !cert.IsCA {
		return nil, nil, errors.New("not a CA certificate")
	}
	return cert, signer, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (KeyPair, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("encode key: %w", err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
	}, nil
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func keyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return sum[:20], nil
}

func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// WriteFiles writes kp to certPath and keyPath; the key is readable by its
// owner only. Each file is replaced whole or not at all and synced (a
// power cut after a plain write could leave an empty CA key), and the key
// goes first: a certificate on disk means its key is there too.
func (kp KeyPair) WriteFiles(certPath, keyPath string) error {
	if err := atomicfile.WriteFile(keyPath, kp.KeyPEM, 0o600); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	if err := atomicfile.WriteFile(certPath, kp.CertPEM, 0o644); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	return nil
}
