package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// DefaultClusterName is the cluster name when none is given: server
// certificates then name server.global.plugreg (Nomad's default region has
// the same name, for the same reason: one cluster is the usual case).
const DefaultClusterName = "global"

// Config names the files and the policy. The zero value is TLS off.
type Config struct {
	CAFile   string // PEM: the CA (or CAs) that sign the cluster's certificates
	CertFile string // PEM: this agent's certificate (with intermediates)
	KeyFile  string // PEM: its private key

	VerifyIncoming       bool
	VerifyOutgoing       bool
	VerifyServerHostname bool

	// ClusterName makes the server name server.<ClusterName>.plugreg
	// (empty: DefaultClusterName).
	ClusterName string
}

// Enabled reports whether any TLS material is configured.
func (c Config) Enabled() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// ServerName is the DNS name every server certificate of the cluster
// carries: server.<cluster>.plugreg (Consul: server.<dc>.consul).
func (c Config) ServerName() string { return "server." + c.cluster() + ".plugreg" }

// ClientName is the DNS name `plugreg tls cert create -client` puts in a
// client certificate.
func (c Config) ClientName() string { return "client." + c.cluster() + ".plugreg" }

func (c Config) cluster() string {
	if c.ClusterName == "" {
		return DefaultClusterName
	}
	return c.ClusterName
}

// Validate checks that the policy can be carried out with the files named.
func (c Config) Validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%w: -tls-cert-file and -tls-key-file go together", ErrConfig)
	}
	if c.VerifyServerHostname {
		c.VerifyOutgoing = true
	}
	if c.VerifyIncoming && (c.CAFile == "" || c.CertFile == "") {
		return fmt.Errorf("%w: -verify-incoming needs -tls-ca-file, -tls-cert-file and -tls-key-file", ErrConfig)
	}
	if c.VerifyOutgoing && c.CAFile == "" {
		return fmt.Errorf("%w: -verify-outgoing needs -tls-ca-file", ErrConfig)
	}
	return nil
}

// ErrConfig: the TLS settings do not make sense together.
var ErrConfig = errors.New("tlsutil: bad TLS configuration")

// material is what the files held at the last (re)load.
type material struct {
	pool *x509.CertPool   // nil: no CA file
	cert *tls.Certificate // nil: no key pair
}

// Configurator hands out *tls.Config that read the current material at
// every handshake. Safe for concurrent use.
type Configurator struct {
	cfg Config
	cur atomic.Pointer[material]
}

// NewConfigurator validates cfg and loads its files.
func NewConfigurator(cfg Config) (*Configurator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.VerifyServerHostname {
		cfg.VerifyOutgoing = true
	}
	c := &Configurator{cfg: cfg}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Config returns the settings (VerifyOutgoing set when VerifyServerHostname is).
func (c *Configurator) Config() Config { return c.cfg }

// Reload re-reads the files. On error the material in use stays.
func (c *Configurator) Reload() error {
	m, err := load(c.cfg)
	if err != nil {
		return err
	}
	c.cur.Store(m)
	return nil
}

func load(cfg Config) (*material, error) {
	m := &material{}
	if cfg.CAFile != "" {
		pool, err := LoadCAPool(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		m.pool = pool
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load key pair %s, %s: %w", cfg.CertFile, cfg.KeyFile, err)
		}
		m.cert = &cert
	}
	return m, nil
}

// LoadCAPool reads PEM certificates from path into a pool.
func LoadCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// Material returns the CA pool and key pair in use (for tests and `agent
// self`); either may be nil.
func (c *Configurator) Material() (*x509.CertPool, *tls.Certificate) {
	m := c.cur.Load()
	return m.pool, m.cert
}

// ServesTLS reports whether this agent's listeners (server port, HTTP)
// speak TLS: it has a key pair.
func (c *Configurator) ServesTLS() bool {
	return c != nil && c.cur.Load().cert != nil
}

// DialsTLS reports whether connections to server ports use TLS.
func (c *Configurator) DialsTLS() bool { return c != nil && c.cfg.VerifyOutgoing }

// RequiresTLS reports whether the server port refuses plaintext.
func (c *Configurator) RequiresTLS() bool { return c != nil && c.cfg.VerifyIncoming }

// ProvesServers says whether the server port tells servers from other
// peers (VerifyIncoming and VerifyServerHostname): without it, anyone who
// reaches the port may act as a server.
func (c *Configurator) ProvesServers() bool {
	return c != nil && c.cfg.VerifyIncoming && c.cfg.VerifyServerHostname
}

// IncomingConfig is the *tls.Config of a listener (the server port's TLS
// connections, HTTPS): this agent's certificate, and with VerifyIncoming a
// client certificate signed by the CA is required.
func (c *Configurator) IncomingConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := c.cur.Load()
			cfg := &tls.Config{
				MinVersion: tls.VersionTLS12,
				ClientCAs:  m.pool,
				ClientAuth: tls.VerifyClientCertIfGiven,
				// No TLS 1.3 session tickets: nothing arrives unasked on an
				// idle pooled connection (the pool takes unread bytes for a
				// protocol error), and each connection is verified in full.
				SessionTicketsDisabled: true,
			}
			if m.cert != nil {
				cfg.Certificates = []tls.Certificate{*m.cert}
			}
			if c.cfg.VerifyIncoming {
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
			}
			return cfg, nil
		},
	}
}

// OutgoingConfig is the *tls.Config of a connection to a server port: the
// server's certificate is verified against the CA, and with
// VerifyServerHostname must name ServerName; this agent presents its own
// certificate, if it has one.
func (c *Configurator) OutgoingConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if m := c.cur.Load(); m.cert != nil {
				return m.cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
		// The pool is read at each handshake (it may be reloaded), so the
		// chain is verified here instead of through RootCAs.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyChain(c.cur.Load().pool, cs.PeerCertificates, c.peerName(), x509.ExtKeyUsageServerAuth)
		},
	}
	return cfg
}

func (c *Configurator) peerName() string {
	if c.cfg.VerifyServerHostname {
		return c.cfg.ServerName()
	}
	return ""
}

// VerifyServerPeer checks that an incoming connection's peer may act as a
// server (Raft, and the server-only internal RPC): with VerifyIncoming and
// VerifyServerHostname, its certificate must name the cluster's server
// name, so that holding a client certificate is not enough. Without them
// nothing is checked: any peer may (docs/security.md).
func (c *Configurator) VerifyServerPeer(cs tls.ConnectionState) error {
	if !c.ProvesServers() {
		return nil
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no client certificate")
	}
	if err := cs.PeerCertificates[0].VerifyHostname(c.cfg.ServerName()); err != nil {
		return fmt.Errorf("peer is not a server of this cluster: %w", err)
	}
	return nil
}

// verifyChain verifies a peer's chain against pool, and its name when name
// is not empty.
func verifyChain(pool *x509.CertPool, chain []*x509.Certificate, name string, usage x509.ExtKeyUsage) error {
	if pool == nil {
		return errors.New("no CA to verify the peer with (-tls-ca-file)")
	}
	if len(chain) == 0 {
		return errors.New("peer sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         pool,
		DNSName:       name,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}
	for _, ic := range chain[1:] {
		opts.Intermediates.AddCert(ic)
	}
	_, err := chain[0].Verify(opts)
	return err
}

// ClientOptions are what a client (the Go client, the CLI) is given.
type ClientOptions struct {
	CAFile, CertFile, KeyFile string
	// ServerName, when set, is the name the server's certificate must
	// carry; empty: the host of the address dialled.
	ServerName string
}

// ClientConfig builds the *tls.Config of an HTTPS client: the CA verifies
// the server, and a key pair, if given, is presented to servers that
// require one. Without a CA file the system roots are used.
func ClientConfig(o ClientOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.CAFile != "" {
		pool, err := LoadCAPool(o.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate and its key go together", ErrConfig)
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client key pair %s, %s: %w", o.CertFile, o.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
