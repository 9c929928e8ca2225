package client_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
)

// ConfigFromEnv reads the environment as Consul's api.DefaultConfig does:
// the addresses (comma-separated; the local agent by default), the token
// or a file that holds it (the file wins, as CONSUL_HTTP_TOKEN_FILE does),
// and the TLS files.
func TestConfigFromEnv(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("  from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		env     map[string]string
		want    client.Config
		wantErr error
	}{
		{name: "nothing set", want: client.Config{Addrs: []string{"127.0.0.1:7700"}}},
		{name: "addresses", env: map[string]string{"PLUGREG_ADDR": " 10.0.0.1:7700, https://10.0.0.2:7700 ,,"},
			want: client.Config{Addrs: []string{"10.0.0.1:7700", "https://10.0.0.2:7700"}}},
		{name: "blank addresses", env: map[string]string{"PLUGREG_ADDR": " , "}, want: client.Config{Addrs: []string{"127.0.0.1:7700"}}},
		{name: "token", env: map[string]string{"PLUGREG_TOKEN": "secret"}, want: client.Config{Addrs: []string{"127.0.0.1:7700"}, Token: "secret"}},
		{name: "token file, trimmed", env: map[string]string{"PLUGREG_TOKEN_FILE": tokenFile},
			want: client.Config{Addrs: []string{"127.0.0.1:7700"}, Token: "from-the-file"}},
		{name: "the token file wins over the token", env: map[string]string{"PLUGREG_TOKEN": "secret", "PLUGREG_TOKEN_FILE": tokenFile},
			want: client.Config{Addrs: []string{"127.0.0.1:7700"}, Token: "from-the-file"}},
		{name: "a token file that is not there", env: map[string]string{"PLUGREG_TOKEN": "secret", "PLUGREG_TOKEN_FILE": filepath.Join(dir, "nope")}, wantErr: fs.ErrNotExist},
		{name: "an empty token file", env: map[string]string{"PLUGREG_TOKEN_FILE": empty}, wantErr: errors.New("it is empty")},
		{name: "TLS", env: map[string]string{"PLUGREG_CACERT": "/etc/plugreg/ca.pem", "PLUGREG_CLIENT_CERT": "/etc/plugreg/cli.pem",
			"PLUGREG_CLIENT_KEY": "/etc/plugreg/cli-key.pem", "PLUGREG_TLS_SERVER_NAME": "server.dc1.plugreg"},
			want: client.Config{Addrs: []string{"127.0.0.1:7700"}, TLSOptions: tlsutil.ClientOptions{CAFile: "/etc/plugreg/ca.pem",
				CertFile: "/etc/plugreg/cli.pem", KeyFile: "/etc/plugreg/cli-key.pem", ServerName: "server.dc1.plugreg"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := client.ConfigFromEnv(func(k string) string { return tc.env[k] })
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("ConfigFromEnv: %v", err)
			case tc.wantErr != nil && (err == nil || !errors.Is(err, tc.wantErr) && !strings.Contains(err.Error(), tc.wantErr.Error())):
				t.Fatalf("ConfigFromEnv: %v; want %v", err, tc.wantErr)
			case tc.wantErr != nil:
				if !strings.Contains(err.Error(), "PLUGREG_TOKEN_FILE") {
					t.Fatalf("ConfigFromEnv: %v; want it to name PLUGREG_TOKEN_FILE", err)
				}
			case !reflect.DeepEqual(got, tc.want):
				t.Fatalf("ConfigFromEnv: %+v; want %+v", got, tc.want)
			}
		})
	}
}

// DefaultConfig reads the process's environment, and New builds HTTPS
// from the TLS files it names: addresses without a scheme are https, and
// a file that cannot be loaded fails New.
func TestDefaultConfigBuildsTLS(t *testing.T) {
	ca := testpki.New(t, "dc1")
	cli := ca.Client("")
	t.Setenv("PLUGREG_ADDR", "127.0.0.1:7700")
	t.Setenv("PLUGREG_TOKEN", "")
	t.Setenv("PLUGREG_TOKEN_FILE", "")
	t.Setenv("PLUGREG_TLS_SERVER_NAME", "")
	t.Setenv("PLUGREG_CACERT", ca.CAFile)
	t.Setenv("PLUGREG_CLIENT_CERT", cli.Cert)
	t.Setenv("PLUGREG_CLIENT_KEY", cli.Key)
	cfg, err := client.DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got := c.Addrs(); len(got) != 1 || got[0] != "https://127.0.0.1:7700" {
		t.Fatalf("Addrs: %v; want https://127.0.0.1:7700", got)
	}
	cfg.TLSOptions.KeyFile = filepath.Join(t.TempDir(), "nope.pem")
	if _, err := client.New(cfg); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("New with a key file that is not there: %v", err)
	}
}
