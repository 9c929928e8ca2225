package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tlsutil"
)

// security is the -secure run's setup: every agent on mutual TLS
// (-verify-incoming, -verify-server-hostname), gossip encrypted, and ACLs
// on with default deny; the harness speaks HTTPS with a client certificate and the
// operator token, each client agent carries an agent token bound to its
// node (docs/security.md).
type security struct {
	caFile             string
	serverCert, srvKey string
	clientCert, cliKey string
	harnessTLS         *http.Transport // only its TLSClientConfig is used
	gossipKey          string          // -encrypt of every agent

	mu       sync.Mutex
	operator string            // set by bootstrap
	agents   map[string]string // client agent -> its agent token, set by bootstrap
}

// secure is the run's security, nil for a plaintext run. Set once, before
// any agent or client starts.
var secure *security

func newSecurity(dir string, clientAgents int) (*security, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := tlsutil.CreateCA(tlsutil.CAOptions{CommonName: "jepsen CA"})
	if err != nil {
		return nil, err
	}
	s := &security{caFile: filepath.Join(dir, "ca.pem")}
	if s.gossipKey, err = gossip.GenerateKey(); err != nil {
		return nil, err
	}
	if err := ca.WriteFiles(s.caFile, filepath.Join(dir, "ca-key.pem")); err != nil {
		return nil, err
	}
	// One certificate per kind, naming every address of its kind: the
	// harness dials agents by IP.
	var srvIPs, cliIPs []net.IP
	for i := 1; i <= 3; i++ {
		srvIPs = append(srvIPs, net.IPv4(127, 0, 0, byte(i)))
	}
	for j := 0; j < clientAgents; j++ {
		cliIPs = append(cliIPs, net.IPv4(127, 0, 0, byte(4+j)))
	}
	issue := func(o tlsutil.CertOptions, name string) (string, string, error) {
		kp, err := tlsutil.CreateCert(ca, o)
		if err != nil {
			return "", "", err
		}
		cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		return cert, key, kp.WriteFiles(cert, key)
	}
	if s.serverCert, s.srvKey, err = issue(tlsutil.CertOptions{Server: true, IPs: srvIPs}, "server"); err != nil {
		return nil, err
	}
	if s.clientCert, s.cliKey, err = issue(tlsutil.CertOptions{IPs: cliIPs}, "client"); err != nil {
		return nil, err
	}
	tc, err := tlsutil.ClientConfig(tlsutil.ClientOptions{CAFile: s.caFile, CertFile: s.clientCert, KeyFile: s.cliKey})
	if err != nil {
		return nil, err
	}
	s.harnessTLS = &http.Transport{TLSClientConfig: tc}
	return s, nil
}

// agentArgs are the security flags of agent n.
func (s *security) agentArgs(n *node) []string {
	client := n.Client
	cert, key := s.serverCert, s.srvKey
	if client {
		cert, key = s.clientCert, s.cliKey
	}
	args := []string{"-tls-ca-file", s.caFile, "-tls-cert-file", cert, "-tls-key-file", key,
		"-verify-incoming", "-verify-outgoing", "-verify-server-hostname",
		"-acl-enabled", "-acl-default-policy", "deny", "-encrypt", s.gossipKey}
	if client {
		s.mu.Lock()
		args = append(args, "-acl-agent-token", s.agents[n.Name])
		s.mu.Unlock()
	}
	return args
}

func (s *security) operatorToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.operator
}

// bootstrap makes the operator token (the harness's) and each client
// agent's token (write on every type, bound to its node) through server i.
func (s *security) bootstrap(ctx context.Context, d *db, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	call := func(path string, body []byte) (api.ACLTokenSecret, error) {
		var out api.ACLTokenSecret
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+d.nodes[i].HTTP+path, bytes.NewReader(body))
			resp, err := d.hc.Do(req)
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && err == nil {
					return out, nil
				}
				err = fmt.Errorf("%s: %d", path, resp.StatusCode)
			}
			select {
			case <-ctx.Done():
				return out, fmt.Errorf("%s: %w", path, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	root, err := call("/v1/acl/bootstrap", nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.operator = root.SecretID
	s.mu.Unlock()
	agents := map[string]string{}
	for _, n := range d.clients {
		body, _ := json.Marshal(api.ACLTokenCreateRequest{Description: "agent " + n.Name, Policies: []api.ACLPolicy{{Kind: api.ACLWrite}}, Node: n.Name})
		t, err := call("/v1/acl/token", body)
		if err != nil {
			return err
		}
		agents[n.Name] = t.SecretID
	}
	s.mu.Lock()
	s.agents = agents
	s.mu.Unlock()
	return nil
}

// secureTransport is every harness connection's transport: in a -secure
// run it turns http:// into https:// and adds the operator token unless
// the request carries one; otherwise it is base.
type secureTransport struct{ base *http.Transport }

func (t secureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if secure == nil {
		return t.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.URL.Scheme = "https"
	if r.Header.Get("X-Plugreg-Token") == "" {
		if tok := secure.operatorToken(); tok != "" {
			r.Header.Set("X-Plugreg-Token", tok)
		}
	}
	return t.base.RoundTrip(r)
}
