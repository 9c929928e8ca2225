package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"github.com/plugreg/plugreg/tlsutil"
)

// dist/server.json and dist/client.json run as they are, but for what is
// the site's own (addresses, paths, key, certificates, token), given on
// the command line, which wins over the file: a server comes up with TLS,
// gossip encryption and ACLs as the file asks, and the client agent joins
// it. So every key is a flag of today's agent and every value parses.
func TestDistConfigsRun(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	dir := t.TempDir()
	ca := testpki.New(t, "dist")
	srv, cli := ca.Server(""), ca.Client("")
	key, err := gossip.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	p := proctest.FreePorts(t, "127.0.0.1", 5)
	site := func(certs testpki.Files) []string {
		return []string{"-bind", "127.0.0.1", "-encrypt", key, "-tls-ca-file", ca.CAFile, "-tls-cert-file", certs.Cert, "-tls-key-file", certs.Key}
	}
	server := proctest.Start(t, "server", bin, filepath.Join(dir, "server.log"), append([]string{"agent", "-config", "../../dist/server.json",
		"-node", "s1", "-data-dir", filepath.Join(dir, "s1"), "-bootstrap-expect", "1", "-join", "127.0.0.1:" + strconv.Itoa(p[2]),
		"-http-port", strconv.Itoa(p[0]), "-server-port", strconv.Itoa(p[1]), "-gossip-port", strconv.Itoa(p[2])}, site(srv)...)...)
	defer server.Terminate(proctest.StopBound)
	tc, err := tlsutil.ClientConfig(tlsutil.ClientOptions{CAFile: ca.CAFile, CertFile: cli.Cert, KeyFile: cli.Key})
	if err != nil {
		t.Fatal(err)
	}
	httpc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	base := "https://127.0.0.1:" + strconv.Itoa(p[0])
	proctest.Poll(t, proctest.Wait, "the server leading, over HTTPS", []*proctest.Proc{server}, func() (bool, string) {
		resp, err := httpc.Get(base + "/v1/health")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	// ACLs with default deny, as the file says: anonymous is refused.
	cl, _ := client.New(client.Config{Addrs: []string{base}, TLS: tc})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Members(ctx); err == nil || !strings.Contains(err.Error(), "permission_denied") {
		t.Fatalf("anonymous members under the file's default deny: %v", err)
	}
	boot, err := cl.ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := client.New(client.Config{Addrs: []string{base}, TLS: tc, Token: boot.SecretID})

	plugins := filepath.Join(dir, "plugins")
	os.MkdirAll(plugins, 0o755)
	host := proctest.Start(t, "host", bin, filepath.Join(dir, "host.log"), append([]string{"agent", "-config", "../../dist/client.json",
		"-node", "host-1", "-data-dir", filepath.Join(dir, "h1"), "-join", "127.0.0.1:" + strconv.Itoa(p[2]),
		"-http-port", strconv.Itoa(p[3]), "-gossip-port", strconv.Itoa(p[4]), "-plugins-dir", plugins,
		"-plugin-socket-group", strconv.Itoa(os.Getgid()), "-acl-agent-token", boot.SecretID}, site(cli)...)...)
	defer host.Terminate(proctest.StopBound)
	proctest.Poll(t, proctest.Wait, "the client agent a member", []*proctest.Proc{server, host}, func() (bool, string) {
		ms, err := root.Members(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range ms {
			if m.Name == "host-1" && m.Status == "alive" && m.Role == "client" {
				return true, ""
			}
		}
		return false, "host-1 not alive yet"
	})
	for _, p := range []*proctest.Proc{host, server} {
		if d, ok := p.Terminate(proctest.StopBound); !ok || p.State().ExitCode() != 0 {
			t.Fatalf("%s: stopped in %v, %v", p.Name, d, p.State())
		}
	}
}

// The completion scripts parse, and sourced in bash they complete
// commands, subcommands and (asking the binary) flags.
func TestCompletion(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	dir := t.TempDir()
	script := filepath.Join(dir, "plugreg.bash")
	out, err := exec.Command(bin, "completion", "bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(script, out, 0o644)
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	complete := func(words ...string) []string {
		t.Helper()
		// COMP_WORDS[0] is the binary as typed: ours.
		line := "source " + script + "; COMP_WORDS=(" + bin
		for _, w := range words {
			line += " '" + w + "'"
		}
		line += "); COMP_CWORD=" + strconv.Itoa(len(words)) + "; _plugreg; printf '%s\\n' \"${COMPREPLY[@]}\""
		out, err := exec.Command("bash", "-c", line).CombinedOutput()
		if err != nil {
			t.Fatalf("complete %v: %v\n%s", words, err, out)
		}
		return strings.Fields(string(out))
	}
	has := func(got []string, want ...string) bool {
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				return false
			}
		}
		return true
	}
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{""}, []string{"agent", "dev", "register", "snapshot", "operator", "version", "completion", "keyring"}},
		{[]string{"sn"}, []string{"snapshot"}},
		{[]string{"snapshot", ""}, []string{"save", "restore", "inspect"}},
		{[]string{"operator", "raft", ""}, []string{"list-peers", "remove-peer", "transfer-leader"}},
		{[]string{"agent", "-data"}, []string{"-data-dir"}},
		{[]string{"agent", "-plugins-d"}, []string{"-plugins-dir", "-plugins-dir-mode"}},
		{[]string{"agent", "-node", "x", "-enc"}, []string{"-encrypt", "-encrypt-verify-incoming", "-encrypt-verify-outgoing"}},
		{[]string{"snapshot", "save", "-st"}, []string{"-stale"}},
		{[]string{"list", "-"}, []string{"-addr", "-token", "-ca-file"}},
	} {
		if got := complete(tc.words...); !has(got, tc.want...) {
			t.Errorf("complete %q: %v, want %v", tc.words, got, tc.want)
		}
	}
	zsh, err := exec.Command(bin, "completion", "zsh").Output()
	if err != nil || !strings.HasPrefix(string(zsh), "#compdef plugreg\n") {
		t.Fatalf("zsh: %v\n%s", err, zsh)
	}
	if z, err := exec.LookPath("zsh"); err == nil {
		zf := filepath.Join(dir, "_plugreg")
		os.WriteFile(zf, zsh, 0o644)
		if out, err := exec.Command(z, "-n", zf).CombinedOutput(); err != nil {
			t.Fatalf("zsh -n: %v\n%s", err, out)
		}
	}
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.HasPrefix(string(out), "plugreg ") || !strings.Contains(string(out), "go1.") {
		t.Fatalf("version: %v\n%s", err, out)
	}
}
