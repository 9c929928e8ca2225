package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/otlptest"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/tlsutil"
)

// `plugreg dev -secure` runs a cluster whose every channel is TLS with
// client certificates and whose API is ACL'd with default deny, and prints
// how to reach it; the printed settings work with the CLI, and without a
// token, a client certificate or TLS nothing is answered. With
// -trace-endpoint every server's spans reach the collector (dev traces
// every request).
func TestDevSecure(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	log := filepath.Join(t.TempDir(), "dev.log")
	rcv := otlptest.Start(t)
	// Fixed ports: dev numbers its agents' ports from a base (+10 each);
	// these are outside every other test's and the bench's.
	p := proctest.Start(t, "dev", bin, log, "dev", "-secure", "-clients", "1", "-http-port", "28500", "-server-port", "28300",
		"-trace-endpoint", rcv.URL)
	defer p.Stop(t)
	env := map[string]string{}
	re := regexp.MustCompile(`export (PLUGREG_[A-Z_]+)=(\S+)`)
	proctest.Poll(t, proctest.Wait, "the dev cluster's settings", []*proctest.Proc{p}, func() (bool, string) {
		for _, m := range re.FindAllStringSubmatch(p.Log(), -1) {
			env[m[1]] = m[2]
		}
		return env["PLUGREG_TOKEN"] != "", "not printed yet"
	})
	runSuggested(t, p, "In another terminal:", "Ctrl-C stops")
	cli := func(token string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		for k, v := range env {
			if k == "PLUGREG_TOKEN" {
				v = token
			}
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := cli(env["PLUGREG_TOKEN"], "acl", "token", "create", "-policy", "write:csi-*", "-json")
	if err != nil {
		t.Fatalf("acl token create: %v\n%s", err, out)
	}
	secret := regexp.MustCompile(`"SecretID": "([^"]+)"`).FindStringSubmatch(out)
	if secret == nil {
		t.Fatalf("no secret in %s", out)
	}
	if out, err := cli(secret[1], "register", "-type", "csi-node", "-name", "ebs", "-alloc", "a1", "-socket", "/run/ebs.sock"); err != nil {
		t.Fatalf("register with the csi token: %v\n%s", err, out)
	}
	proctest.Poll(t, proctest.Wait, "every dev server's spans at the collector", []*proctest.Proc{p}, func() (bool, string) {
		nodes := map[string]bool{}
		for _, s := range rcv.Spans("") {
			nodes[s.Node] = true
		}
		return nodes["dev1"] && nodes["dev2"] && nodes["dev3"], fmt.Sprint(nodes)
	})
	if out, err := cli(secret[1], "register", "-type", "device", "-name", "gpu", "-alloc", "g1", "-socket", "/run/g.sock"); err == nil || !strings.Contains(out, "permission_denied") {
		t.Fatalf("a csi token registering a device: %v\n%s", err, out)
	}
	// list -filter: the server's filter, and its refusal with the position.
	if out, err := cli(secret[1], "list", "-filter", `Name == "ebs"`, "csi-node"); err != nil || !strings.Contains(out, "(1 plugin at index") {
		t.Fatalf("list -filter matching: %v\n%s", err, out)
	}
	if out, err := cli(secret[1], "list", "-filter", `Options.zone == "none"`, "csi-node"); err != nil || !strings.Contains(out, "(0 plugins at index") {
		t.Fatalf("list -filter matching nothing: %v\n%s", err, out)
	}
	if out, err := cli(secret[1], "list", "-filter", `Name = "ebs"`, "csi-node"); err == nil || !strings.Contains(out, "filter: 1:6 (5)") {
		t.Fatalf("list -filter with a bad expression: %v\n%s", err, out)
	}
	if out, err := cli(secret[1], "watch", "-timeout", "1s", "-filter", `Name ==`, "csi-node"); err == nil || !strings.Contains(out, "filter: 1:8 (7)") {
		t.Fatalf("watch -filter with a bad expression: %v\n%s", err, out)
	}
	if out, err := cli("", "list", "csi-node"); err == nil || !strings.Contains(out, "permission_denied") {
		t.Fatalf("no token: %v\n%s", err, out)
	}
	// Gossip is encrypted: one key, on the three servers and the client.
	if out, err := cli(env["PLUGREG_TOKEN"], "keyring", "-list"); err != nil || !regexp.MustCompile(`(?m)^\S{44}\s+4/4\s+4$`).MatchString(out) {
		t.Fatalf("keyring -list: %v\n%s", err, out)
	}
	if out, err := cli(secret[1], "keyring", "-list"); err == nil || !strings.Contains(out, "permission_denied") {
		t.Fatalf("keyring -list with a write token: %v\n%s", err, out)
	}

	// Without a client certificate, or without TLS, nothing answers.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noCert, err := tlsutil.ClientConfig(tlsutil.ClientOptions{CAFile: env["PLUGREG_CACERT"]})
	if err != nil {
		t.Fatal(err)
	}
	addrs := strings.Split(env["PLUGREG_ADDR"], ",")
	c, _ := client.New(client.Config{Addrs: addrs, TLS: noCert, Token: env["PLUGREG_TOKEN"]})
	if _, _, err := c.List(ctx, "csi-node", nil); err == nil {
		t.Fatal("answered a client without a certificate")
	}
	plain, _ := client.New(client.Config{Addrs: []string{strings.TrimPrefix(addrs[0], "https://")}, Token: env["PLUGREG_TOKEN"]})
	if _, _, err := plain.List(ctx, "csi-node", nil); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("plaintext: %v, want a refusal", err)
	}
}

// runSuggested runs, as a shell would, the indented lines dev printed
// between the lines containing from and to: its exports and the commands
// it suggests, spelled as printed. Each must succeed.
func runSuggested(t *testing.T, p *proctest.Proc, from, to string) {
	t.Helper()
	var script []string
	proctest.Poll(t, proctest.Wait, "dev's suggestions printed", []*proctest.Proc{p}, func() (bool, string) {
		log := p.Log()
		i, j := strings.Index(log, from), strings.Index(log, to)
		if i < 0 || j < i {
			return false, "not printed yet"
		}
		script = []string{"set -e"}
		for _, l := range strings.Split(log[i:j], "\n") {
			if strings.HasPrefix(l, "  ") {
				script = append(script, strings.TrimSpace(l))
			}
		}
		return true, ""
	})
	if len(script) < 3 {
		t.Fatalf("no commands suggested in:\n%s", p.Log())
	}
	var out []byte
	proctest.Poll(t, proctest.Wait, "dev's suggested commands, as printed", []*proctest.Proc{p}, func() (bool, string) {
		var err error
		out, err = exec.Command("sh", "-c", strings.Join(script, "\n")).CombinedOutput()
		return err == nil, fmt.Sprintf("%v\n%s\n%s", err, strings.Join(script, "\n"), out)
	})
}

// The commands plain dev suggests run as printed: the binary as the user
// started it (here by its path), not a "plugreg" that may not be on the
// PATH.
func TestDevSuggestionsWorkAsPrinted(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	// Fixed ports, as TestDevSecure's, apart from them.
	p := proctest.Start(t, "dev", bin, filepath.Join(t.TempDir(), "dev.log"), "dev", "-http-port", "28700", "-server-port", "28800")
	defer p.Stop(t)
	runSuggested(t, p, "Try, in another terminal:", "The web UI")
	if !strings.Contains(p.Log(), "  "+bin+" members") {
		t.Fatalf("dev suggests its commands by another name than the binary's path %s:\n%s", bin, p.Log())
	}
}
