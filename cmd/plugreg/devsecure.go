package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tlsutil"
)

// devSecurity is what `plugreg dev -secure` sets up: a CA and certificates
// in the data dir, the servers' and the client agents' TLS, and (after
// the servers elect a leader) the ACL bootstrap, then a token bound to
// each client agent's node.
type devSecurity struct {
	caFile, cliCert, cliKey string
	server, client          *tlsutil.Configurator
	operatorToken           string
	gossipKey               string // every agent's -encrypt
}

// gossipEncryption opens (creating it from the dev gossip key) the
// keyring in an agent's data dir.
func (d *devSecurity) gossipEncryption(dataDir string) (gossip.Encryption, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return gossip.Encryption{}, err
	}
	kr, _, err := gossip.OpenKeyring(filepath.Join(dataDir, gossip.KeyringFileName), d.gossipKey)
	return gossip.Encryption{Keyring: kr}, err
}

func newDevSecurity(dir string) (*devSecurity, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := tlsutil.CreateCA(tlsutil.CAOptions{CommonName: "plugreg dev CA"})
	if err != nil {
		return nil, err
	}
	d := &devSecurity{caFile: filepath.Join(dir, caCertName)}
	if d.gossipKey, err = gossip.GenerateKey(); err != nil {
		return nil, err
	}
	if err := ca.WriteFiles(d.caFile, filepath.Join(dir, caKeyName)); err != nil {
		return nil, err
	}
	issue := func(server bool, name string) (string, string, error) {
		kp, err := tlsutil.CreateCert(ca, tlsutil.CertOptions{Server: server})
		if err != nil {
			return "", "", err
		}
		cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		return cert, key, kp.WriteFiles(cert, key)
	}
	srvCert, srvKey, err := issue(true, "global-server-plugreg-0")
	if err != nil {
		return nil, err
	}
	agentCert, agentKey, err := issue(false, "global-client-plugreg-0")
	if err != nil {
		return nil, err
	}
	if d.cliCert, d.cliKey, err = issue(false, "global-cli-plugreg-0"); err != nil {
		return nil, err
	}
	policy := tlsutil.Config{CAFile: d.caFile, VerifyIncoming: true, VerifyServerHostname: true}
	sc, cc := policy, policy
	sc.CertFile, sc.KeyFile = srvCert, srvKey
	cc.CertFile, cc.KeyFile = agentCert, agentKey
	if d.server, err = tlsutil.NewConfigurator(sc); err != nil {
		return nil, err
	}
	if d.client, err = tlsutil.NewConfigurator(cc); err != nil {
		return nil, err
	}
	return d, nil
}

// bootstrap makes the operator token, through a server's own backend.
func (d *devSecurity) bootstrap(n *node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := n.srv.Backend()
	root, err := b.ACLBootstrap(ctx)
	if err != nil {
		return fmt.Errorf("acl bootstrap: %w", err)
	}
	d.operatorToken = root.SecretID
	return nil
}

// agentToken makes client agent node's token: write on every type, bound
// to its node (docs/security.md).
func (d *devSecurity) agentToken(n *node, node string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := n.srv.Backend().ACLTokenCreate(ctx, api.ACLTokenCreateRequest{Description: "agent " + node, Policies: []api.ACLPolicy{{Kind: api.ACLWrite}}, Node: node})
	if err != nil {
		return "", fmt.Errorf("agent token of %s: %w", node, err)
	}
	return t.SecretID, nil
}
