package client

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// The environment DefaultConfig reads, as Consul's api.DefaultConfig reads
// CONSUL_HTTP_ADDR and the rest. The CLI's flags win over them.
const (
	// EnvAddr: node HTTP addresses, comma-separated (Config.Addrs).
	EnvAddr = "PLUGREG_ADDR"
	// EnvToken: the ACL token (Config.Token).
	EnvToken = "PLUGREG_TOKEN"
	// EnvTokenFile: a file holding the ACL token, as a Kubernetes Secret
	// is mounted (ReadTokenFile). It wins over EnvToken when both are set,
	// as CONSUL_HTTP_TOKEN_FILE does over CONSUL_HTTP_TOKEN.
	EnvTokenFile = "PLUGREG_TOKEN_FILE"
	// EnvCACert: the PEM CA that verifies the agents' HTTPS certificates;
	// with it, addresses without a scheme are https (Config.TLSOptions).
	EnvCACert = "PLUGREG_CACERT"
	// EnvClientCert and EnvClientKey: a client certificate and its key,
	// for agents that verify incoming connections.
	EnvClientCert = "PLUGREG_CLIENT_CERT"
	EnvClientKey  = "PLUGREG_CLIENT_KEY"
	// EnvTLSServerName: the name the agents' certificates must carry
	// (empty: the address's host).
	EnvTLSServerName = "PLUGREG_TLS_SERVER_NAME"
)

// DefaultAddr is the address of the local agent: Config.Addrs of
// DefaultConfig when PLUGREG_ADDR is empty.
const DefaultAddr = "127.0.0.1:7700"

// DefaultConfig is the configuration the environment gives
// (ConfigFromEnv of the process's environment): the agent at
// PLUGREG_ADDR, else DefaultAddr, with PLUGREG_TOKEN_FILE's or
// PLUGREG_TOKEN's token and the TLS files PLUGREG_CACERT,
// PLUGREG_CLIENT_CERT and PLUGREG_CLIENT_KEY name. Its error is a token
// file that cannot be read.
func DefaultConfig() (Config, error) { return ConfigFromEnv(os.Getenv) }

// ConfigFromEnv is DefaultConfig with the environment read through
// getenv (os.Getenv, or a map's lookup in a test).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{Addrs: SplitAddrs(getenv(EnvAddr)), Token: strings.TrimSpace(getenv(EnvToken))}
	if len(cfg.Addrs) == 0 {
		cfg.Addrs = []string{DefaultAddr}
	}
	if path := getenv(EnvTokenFile); path != "" {
		tok, err := ReadTokenFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", EnvTokenFile, err)
		}
		cfg.Token = tok
	}
	cfg.TLSOptions.CAFile = getenv(EnvCACert)
	cfg.TLSOptions.CertFile = getenv(EnvClientCert)
	cfg.TLSOptions.KeyFile = getenv(EnvClientKey)
	cfg.TLSOptions.ServerName = getenv(EnvTLSServerName)
	return cfg, nil
}

// SplitAddrs reads a comma-separated list of addresses (PLUGREG_ADDR, the
// CLI's -addr): spaces around each are dropped, and empty entries.
func SplitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// ReadTokenFile reads an ACL token from a file (PLUGREG_TOKEN_FILE, the
// CLI's -token-file): its content without surrounding white space, which
// a file written by echo or an editor ends with. An empty file is an
// error: a request without a token would be answered as anonymous.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s: %w", path, errEmptyTokenFile)
	}
	return tok, nil
}

var errEmptyTokenFile = errors.New("it is empty")
