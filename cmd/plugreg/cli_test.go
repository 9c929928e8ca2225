package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
)

func TestParseArgsIntersperses(t *testing.T) {
	cases := []struct {
		args   []string
		pos    string
		format string
	}{
		{[]string{"csi", "ebs"}, "csi ebs", "table"},
		{[]string{"-json", "csi", "ebs"}, "csi ebs", "json"},
		{[]string{"csi", "-json", "ebs"}, "csi ebs", "json"},
		{[]string{"csi", "ebs", "-json"}, "csi ebs", "json"},
		{[]string{"csi", "-o", "yaml", "ebs"}, "csi ebs", "yaml"},
		{[]string{"--format=yaml", "csi", "ebs"}, "csi ebs", "yaml"},
		{[]string{"--", "-odd-name"}, "-odd-name", "table"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cf := newClientFlags("get", "", "")
			if err := cf.parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(cf.args, " "); got != tc.pos || cf.out.format != tc.format {
				t.Fatalf("positional %q format %v; want %q %v", got, cf.out.format, tc.pos, tc.format)
			}
		})
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.json")
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	newFS := func() (*flag.FlagSet, *string, *int, *listFlag) {
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		node := fs.String("node", "", "")
		port := fs.Int("http-port", 7700, "")
		var join listFlag
		fs.Var(&join, "join", "")
		return fs, node, port, &join
	}
	fs, node, port, join := newFS()
	fs.Parse([]string{"-node", "cli"})
	if err := applyConfigFile(fs, write(`{"node":"file","http-port":9500,"join":["a:1","b:2"]}`)); err != nil {
		t.Fatal(err)
	}
	if *node != "cli" || *port != 9500 || join.String() != "a:1,b:2" {
		t.Fatalf("node %q port %d join %q: the command line must win, the file fill the rest", *node, *port, join)
	}
	for _, bad := range []string{`{"nodes":"x"}`, `{"http-port":"many"}`, `not json`} {
		fs, _, _, _ := newFS()
		if err := applyConfigFile(fs, write(bad)); err == nil {
			t.Fatalf("config %s accepted", bad)
		}
	}
}

// -required-plugin-types reaches the HTTP API as a list, given as a comma
// list, repeated, or as a -config list (a plain string flag kept only the
// list's last item).
func TestRequiredPluginTypesFlag(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.json")
	os.WriteFile(cfg, []byte(`{"required-plugin-types":["csi","dra"]}`), 0o600)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"comma list", []string{"-required-plugin-types", "csi, dra"}},
		{"repeated", []string{"-required-plugin-types", "csi", "-required-plugin-types", "dra"}},
		{"config list", []string{"-config", cfg}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseAgentFlags(append([]string{"-data-dir", filepath.Join(dir, "data")}, tc.args...))
			if err != nil {
				t.Fatal(err)
			}
			a, err := s.setup()
			if err != nil {
				t.Fatal(err)
			}
			if got := a.api.requiredTypes; !slices.Equal(got, []string{"csi", "dra"}) {
				t.Fatalf("required types %q, want csi and dra", got)
			}
		})
	}
}

// -plugins-dir-mode reaches the plugins dir's watcher as given, on the
// command line or in -config; unset, it is auto (pluginwatcher resolves
// it by the dir's name).
func TestPluginsDirModeFlag(t *testing.T) {
	config := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(config, []byte(`{"plugins-dir-mode": "shared"}`), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unset", nil, "auto"},
		{"owned", []string{"-plugins-dir-mode", "owned"}, "owned"},
		{"shared from -config", []string{"-config", config}, "shared"},
		{"the command line wins over -config", []string{"-config", config, "-plugins-dir-mode", "owned"}, "owned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseAgentFlags(append([]string{"-data-dir", t.TempDir()}, tc.args...))
			if err != nil {
				t.Fatal(err)
			}
			hs, err := s.hostServicesConfig()
			if err != nil {
				t.Fatal(err)
			}
			if hs.pluginsDirMode != tc.want {
				t.Fatalf("mode %q, want %q", hs.pluginsDirMode, tc.want)
			}
		})
	}
}

// An agent refuses bad flags before it starts anything: nothing is created
// in its data dir, and the error names the flag and the path.
func TestAgentRefusesBadFlagsAtStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, nil, 0o600)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"plugins dir missing", []string{"-plugins-dir", "/nonexistent/plugins"}, "/nonexistent/plugins"},
		{"plugins dir is a file", []string{"-plugins-dir", file}, "not a directory"},
		{"plugins dir mode unknown", []string{"-plugins-dir-mode", "kubelet"}, `-plugins-dir-mode: pluginwatcher: invalid config: mode "kubelet": want auto, shared or owned`},
		{"plugins dir mode capitalised", []string{"-plugins-dir-mode", "Shared"}, `mode "Shared": want auto, shared or owned`},
		{"gossip key not base64", []string{"-encrypt", "not a key!"}, "-encrypt: plugreg: invalid request: gossip key is not valid base64"},
		{"gossip key too short", []string{"-encrypt", "c2hvcnQ="}, "gossip key has 5 bytes"},
		{"plugin socket uid not a number", []string{"-plugin-socket-allow-uid", "0,nobody"}, `-plugin-socket-allow-uid: "nobody" is not a uid`},
		{"client with server flags", []string{"-client", "-bootstrap-expect", "3"}, "-bootstrap-expect, -server-port: server flags"},
		{"wal segment too small", []string{"-wal-segment-size", "4096"}, "wal segment size 4096: use 16384 to 1073741824 bytes"},
		{"unknown log store", []string{"-log-store", "rocks"}, `log store "rocks": use "boltdb" or "wal"`},
		{"shared token with ACLs", []string{"-acl-token", "s", "-acl-enabled"}, "-acl-token and -acl-enabled: choose one"},
		{"initial token without ACLs", []string{"-acl-initial-management-token", "0123456789abcdef-initial"}, "-acl-initial-management-token bootstraps ACLs: it needs -acl-enabled"},
		{"initial token too short", []string{"-acl-enabled", "-acl-initial-management-token", "short"}, "want at least 16 characters"},
		{"no body read time", []string{"-http-body-read-timeout", "0s"}, "-http-body-read-timeout 0s: want a positive duration"},
		{"allowed host with a port", []string{"-http-allowed-hosts", "reg.example.com,reg.example:7700"}, `-http-allowed-hosts: "reg.example:7700": want a DNS name without port or scheme`},
		{"reap rate not a number", []string{"-node-reap-rate", "NaN"}, "node reap rate NaN"},
		{"negative reap burst", []string{"-node-reap-burst", "-1"}, "node reap burst -1"},
		{"reap pause above 1", []string{"-node-reap-pause-above", "1.5"}, "node reap pause above 1.5: want a fraction from 0 to 1"},
		{"negative reap pause minimum", []string{"-node-reap-pause-min-failed", "-2"}, "node reap pause min failed -2"},
		{"client with reap brakes", []string{"-client", "-node-reap-pause-above", "1"}, "-node-reap-pause-above, -server-port: server flags"},
		{"negative lease expiry rate", []string{"-lease-expiry-rate", "-1"}, "-lease-expiry-rate -1: want a positive number"},
		{"probe port out of range", []string{"-probe-port", "70000"}, "-probe-port 70000: want a free port other than -http-port"},
		{"trace endpoint without a scheme", []string{"-trace-endpoint", "collector:4318"}, `trace endpoint "collector:4318": want an OTLP/HTTP URL`},
		{"trace sample rate above 1", []string{"-trace-sample-rate", "2"}, "trace sample rate 2: want a share between 0 and 1"},
		{"required type not an identifier", []string{"-required-plugin-types", "csi,csi/node"}, `-required-plugin-types: plugreg: invalid request: type "csi/node" contains '/'`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			err := runAgent(append([]string{"-node", "x", "-data-dir", data, "-bind", "127.0.0.1", "-http-port", "0", "-gossip-port", "0", "-server-port", "0"}, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Fatalf("the data dir was created (%v): the agent started before refusing", err)
			}
		})
	}
}

// The reap brakes reach the server's configuration from the flags and
// from -config; unset, they are cluster's defaults.
func TestAgentReapBrakeFlags(t *testing.T) {
	config := filepath.Join(t.TempDir(), "agent.json")
	os.WriteFile(config, []byte(`{"node-reap-pause-above": 1, "node-reap-rate": -1}`), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want cluster.ReapBrakes
	}{
		{"defaults", nil, cluster.DefaultReapBrakes()},
		{"flags", []string{"-node-reap-rate", "0.5", "-node-reap-burst", "10", "-node-reap-pause-above", "0.8", "-node-reap-pause-min-failed", "5"},
			cluster.ReapBrakes{Rate: 0.5, Burst: 10, PauseAbove: 0.8, PauseMinFailed: 5}},
		{"config file", []string{"-config", config}, cluster.ReapBrakes{Rate: -1, Burst: 3, PauseAbove: 1, PauseMinFailed: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseAgentFlags(append([]string{"-data-dir", t.TempDir()}, tc.args...))
			if err != nil {
				t.Fatal(err)
			}
			a, err := s.setup()
			if err != nil {
				t.Fatal(err)
			}
			if got := s.serverConfig(a, gossip.Encryption{}).ReapBrakes; got != tc.want {
				t.Fatalf("brakes %+v, want %+v", got, tc.want)
			}
		})
	}
}

// An agent says at start what its settings leave open; with everything of
// docs/security.md on, nothing.
func TestUnprotectedAtStart(t *testing.T) {
	ca := testpki.New(t, "cluster")
	srv := ca.Server("")
	tlsc, err := tlsutil.NewConfigurator(tlsutil.Config{CAFile: ca.CAFile, CertFile: srv.Cert, KeyFile: srv.Key, VerifyIncoming: true})
	if err != nil {
		t.Fatal(err)
	}
	kr, _, err := gossip.OpenKeyring(filepath.Join(t.TempDir(), gossip.KeyringFileName), "cGx1Z3JlZy10ZXN0LWtleS0zMi1ieXRlcy1sb25nLi4=")
	if err != nil {
		t.Fatal(err)
	}
	secureACL := apiOptions{acl: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}}
	for _, tc := range []struct {
		name string
		ao   apiOptions
		tls  *tlsutil.Configurator
		enc  gossip.Encryption
		want []string
	}{
		{"defaults", apiOptions{}, nil, gossip.Encryption{}, []string{"no ACLs", "plain HTTP", "gossip is not encrypted"}},
		{"shared token", apiOptions{token: "s"}, tlsc, gossip.Encryption{Keyring: kr}, []string{"one shared -acl-token"}},
		{"default allow", apiOptions{acl: httpapi.ACLConfig{Enabled: true}}, tlsc, gossip.Encryption{Keyring: kr}, []string{"default-policy allow"}},
		{"everything on", secureACL, tlsc, gossip.Encryption{Keyring: kr}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unprotected(tc.ao, tc.tls, tc.enc)
			if len(got) != len(tc.want) {
				t.Fatalf("%q, want %d lines like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("line %d %q, want %q in it", i, got[i], w)
				}
			}
		})
	}
}

func TestHealthText(t *testing.T) {
	seen := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    *api.InstanceHealth
		want string
	}{
		{nil, "passing"},
		{&api.InstanceHealth{Status: "suspect", Check: "probe", Reason: "slow", LastSeen: seen}, "suspect (probe, last seen 2026-11-26T12:00:00Z)"},
	} {
		if got := healthText(&api.PluginInfo{Health: tc.h}); got != tc.want {
			t.Errorf("healthText(%+v) = %q, want %q", tc.h, got, tc.want)
		}
	}
}

// An agent's secrets come from the environment when their flags are not
// given (the Helm chart's way: arguments are visible to every user of
// the machine); a flag wins; a bad key is refused naming the variable,
// before anything is created.
func TestAgentSecretsFromTheEnvironment(t *testing.T) {
	const key, other = "cg8StVXbQJ0gPvMd9o7yrg==", "HgGrPCd8BBmjhsD4O3JTtw=="
	for _, tc := range []struct {
		name            string
		env             map[string]string
		args            []string
		wantKey, wantTo string
		wantErr         string
	}{
		{name: "none"},
		{name: "from the environment", env: map[string]string{"PLUGREG_GOSSIP_KEY": key, "PLUGREG_AGENT_TOKEN": "tok"}, wantKey: key, wantTo: "tok"},
		{name: "flags win", env: map[string]string{"PLUGREG_GOSSIP_KEY": key, "PLUGREG_AGENT_TOKEN": "tok"},
			args: []string{"-encrypt", other, "-acl-agent-token", "flag"}, wantKey: other, wantTo: "flag"},
		{name: "bad key", env: map[string]string{"PLUGREG_GOSSIP_KEY": "not a key!"}, wantErr: "PLUGREG_GOSSIP_KEY: plugreg: invalid request: gossip key is not valid base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PLUGREG_GOSSIP_KEY", "")
			t.Setenv("PLUGREG_AGENT_TOKEN", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			s, err := parseAgentFlags(append([]string{"-data-dir", t.TempDir()}, tc.args...))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.encrypt != tc.wantKey || s.aclAgentToken != tc.wantTo {
				t.Fatalf("key %q token %q, want %q %q", s.encrypt, s.aclAgentToken, tc.wantKey, tc.wantTo)
			}
		})
	}
}
