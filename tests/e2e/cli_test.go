package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"sigs.k8s.io/yaml"
)

var updateGolden = flag.Bool("update", false, "rewrite the CLI's golden outputs in testdata/cli")

// cliRun is one run of the plugreg binary: its exit status and its two
// streams apart, since where a line goes (stdout for what was asked,
// stderr for summaries and mistakes) is part of the contract.
type cliRun struct {
	code           int
	stdout, stderr string
}

func runPlugreg(t *testing.T, bin string, env []string, args ...string) cliRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// Nothing from the developer's shell: PLUGREG_ADDR and friends would
	// change the defaults the help prints.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliRun{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("plugreg %v: %v", args, err)
	}
	return r
}

func (r cliRun) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// The command line's answers to what users of kubectl, etcdctl and
// consul type by habit, byte for byte (testdata/cli/*.golden; go test
// -run TestCLIGolden ./tests/e2e -update rewrites them): help on stdout
// with status 0, a mistake in one line with the one flag's help and
// status 2, suggestions for typos, values explained, config errors at
// line:column. Before, --help went to stderr, `list -h` exited 2, a typo
// printed the whole usage, `-ttl 5` said "parse error" and a config file
// said "unexpected end of JSON input" with no position.
func TestCLIGolden(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	dir := t.TempDir()
	configs := map[string]string{
		"truncated.json":   "{\n  \"node\": \"n1\",\n  \"data-dir\": \"/tmp/x\",\n",
		"unknown-key.json": "{\n  \"node\": \"n1\",\n  \"http-prot\": 7700\n}\n",
		"bad-value.json":   "{\n  \"node\": \"n1\",\n  \"http-port\": \"many\"\n}\n",
	}
	for name, body := range configs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		args []string
	}{
		{"help", []string{"-h"}},
		{"help-word", []string{"help"}},
		{"no-command", nil},
		{"list-help", []string{"list", "-h"}},
		{"help-list", []string{"help", "list"}},
		{"acl-help", []string{"acl", "--help"}},
		{"acl-alone", []string{"acl"}},
		{"typo-command", []string{"lst", "csi"}},
		{"typo-subcommand", []string{"acl", "tokn", "list"}},
		{"typo-flag", []string{"list", "-fromat", "json", "csi"}},
		{"typo-global-flag", []string{"-adr", "127.0.0.1:1", "list", "csi"}},
		{"duration-without-unit", []string{"register", "-ttl", "5"}},
		{"flag-without-value", []string{"list", "csi", "-addr"}},
		{"missing-argument", []string{"list"}},
		{"extra-argument", []string{"types", "csi"}},
		{"bad-format", []string{"list", "-format", "xml", "csi"}},
		{"bad-template", []string{"list", "-format", "{{.Name", "csi"}},
		{"register-names-flags", []string{"register", "-type", "csi", "-name", "ebs", "-alloc", "a1"}},
		{"register-bad-name", []string{"register", "-type", "csi", "-name", "e/bs", "-alloc", "a1", "-socket", "/run/e.sock"}},
		{"config-truncated", []string{"agent", "-config", filepath.Join(dir, "truncated.json")}},
		{"config-unknown-key", []string{"agent", "-config", filepath.Join(dir, "unknown-key.json")}},
		{"config-bad-value", []string{"agent", "-config", filepath.Join(dir, "bad-value.json")}},
		{"agent-argument", []string{"agent", "server"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.ReplaceAll(runPlugreg(t, bin, nil, tc.args...).String(), dir, "DIR")
			golden := filepath.Join("testdata", "cli", tc.name+".golden")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run TestCLIGolden ./tests/e2e -update writes it)", err)
			}
			if got != string(want) {
				t.Fatalf("plugreg %q:\n%s\nwant (%s):\n%s", tc.args, got, golden, want)
			}
		})
	}
}

// A port another process holds is refused in one line that names the
// flag moving it, for each of the agent's ports and for dev. Before, the
// agent said "bind: address already in use" without the flag, and
// plugreg's ports were Consul's, so a host running a Consul agent hit
// it on the first try.
func TestPortInUseNamesItsFlag(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	ports := proctest.FreePorts(t, "127.0.0.1", 4)
	httpPort, serverPort, gossipPort, taken := ports[0], ports[1], ports[2], ports[3]
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := strconv.Itoa
	cases := []struct {
		flag string
		args []string
	}{
		{"-http-port", []string{"agent", "-http-port", p(taken), "-server-port", p(serverPort), "-gossip-port", p(gossipPort)}},
		{"-server-port", []string{"agent", "-http-port", p(httpPort), "-server-port", p(taken), "-gossip-port", p(gossipPort)}},
		{"-gossip-port", []string{"agent", "-http-port", p(httpPort), "-server-port", p(serverPort), "-gossip-port", p(taken)}},
		{"-http-port", []string{"dev", "-http-port", p(taken), "-server-port", p(serverPort)}},
	}
	for _, tc := range cases {
		t.Run(tc.args[0]+tc.flag, func(t *testing.T) {
			args := tc.args
			if args[0] == "agent" {
				args = append(args, "-data-dir", t.TempDir(), "-bind", "127.0.0.1", "-node", "n1")
			}
			r := runPlugreg(t, bin, nil, args...)
			want := fmt.Sprintf("plugreg %s: port %d on 127.0.0.1 is in use by another process: choose another with %s\n", args[0], taken, tc.flag)
			if r.code != 1 || !strings.HasSuffix(r.stderr, want) || strings.Count(r.stderr, "plugreg "+args[0]+":") != 1 {
				t.Fatalf("%s", r)
			}
		})
	}
}

// An address where nothing listens fails at once, in one line naming it
// (the dial is not retried until -timeout), and an address where
// something else answers (a Consul agent, any web server) says so in one
// line. Before: 30 s of silence and "context deadline exceeded", and for
// a web page its HTML, then "(404 )".
func TestCLINamesAnAddressThatIsNotAnAgent(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	ports := proctest.FreePorts(t, "127.0.0.1", 2)
	nothing := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<html><body><h1>Not Found</h1></body></html>\n")
	})}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])))
	if err != nil {
		t.Fatal(err)
	}
	go web.Serve(ln)
	defer web.Close()
	cases := []struct{ addr, want string }{
		{nothing, fmt.Sprintf("plugreg list: no plugreg agent at %s: connection refused\n", nothing)},
		{ln.Addr().String(), fmt.Sprintf("plugreg list: %s answered HTTP 404 (text/html), not as a plugreg agent: is it the right address?\n", ln.Addr())},
	}
	for _, tc := range cases {
		if r := runPlugreg(t, bin, nil, "list", "csi", "-addr", tc.addr); r.code != 1 || r.stderr != tc.want || r.stdout != "" {
			t.Errorf("%s", r)
		}
	}
}

// Against a real cluster: every output format of a read, the table's
// summary on stderr (stdout holds the rows alone), -no-headers, flags
// before the command, -token-file, and watch -- CMD running a handler
// per event with the event on its stdin and in its environment.
func TestCLIOutputsAndHandlers(t *testing.T) {
	const token = "cli-s3cret"
	c := proctest.StartCluster(t, proctest.ClusterConfig{ServerArgs: []string{"-acl-token", token}})
	c.WaitReady(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PLUGREG_ADDR=" + c.Servers[0].HTTP + "," + c.Servers[1].HTTP}
	cli := func(want int, args ...string) cliRun {
		t.Helper()
		r := runPlugreg(t, c.Bin, env, args...)
		if r.code != want {
			t.Fatalf("plugreg %q: exit %d, want %d\n%s", args, r.code, want, r)
		}
		return r
	}
	register := []string{"register", "-type", "csi", "-name", "ebs", "-alloc", "a1", "-node", "n1", "-socket", "/run/ebs.sock"}
	if r := cli(1, register...); !strings.Contains(r.stderr, "permission_denied") {
		t.Fatalf("a write without the token: %s", r)
	}
	cli(0, append([]string{"-token-file", tokenFile}, register...)...)
	withEnvFile := append(env, "PLUGREG_TOKEN_FILE="+tokenFile)
	if r := runPlugreg(t, c.Bin, withEnvFile, "register", "-type", "csi", "-name", "efs", "-alloc", "b1", "-socket", "/run/efs.sock"); r.code != 0 {
		t.Fatalf("PLUGREG_TOKEN_FILE: %s", r)
	}

	table := cli(0, "list", "csi")
	rows := strings.Split(strings.TrimSpace(table.stdout), "\n")
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "NAME") || !strings.HasPrefix(table.stderr, "(2 plugins at index ") {
		t.Fatalf("table: header and two rows on stdout, the summary on stderr:\n%s", table)
	}
	if r := cli(0, "list", "csi", "-no-headers"); strings.Contains(r.stdout, "NAME") || len(strings.Split(strings.TrimSpace(r.stdout), "\n")) != 2 {
		t.Fatalf("-no-headers:\n%s", r)
	}
	for _, format := range []string{"json", "yaml"} {
		r := cli(0, "-format", format, "list", "csi") // a global flag, before the command
		var got []api.PluginInfo
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(r.stdout), &got)
		} else {
			err = yaml.Unmarshal([]byte(r.stdout), &got)
		}
		if err != nil || len(got) != 2 || got[0].Name != "ebs" || got[1].Name != "efs" || r.stderr != "" {
			t.Fatalf("-format %s: %v\n%s", format, err, r)
		}
	}
	if r := cli(0, "list", "csi", "-o", `{{range .}}{{.Name}}={{.ConnectionInfo.SocketPath}} {{end}}`); r.stdout != "ebs=/run/ebs.sock efs=/run/efs.sock \n" || r.stderr != "" {
		t.Fatalf("-o template:\n%s", r)
	}

	// watch -- CMD: the handler writes what it was given to a file per event.
	out := t.TempDir()
	handler := `cat > "$OUT/$PLUGREG_WATCH_INDEX.json"; echo "$PLUGREG_WATCH_EVENT $PLUGREG_WATCH_TYPE $PLUGREG_WATCH_NAME $PLUGREG_WATCH_ALLOC" > "$OUT/$PLUGREG_WATCH_INDEX.env"`
	w := proctest.New("watch", c.Bin, filepath.Join(out, "watch.log"), "watch", "-all", "-addr", c.Servers[2].HTTP, "csi", "--", "sh", "-c", handler)
	w.Env = []string{"OUT=" + out}
	w.Start(t)
	defer w.Stop(t)
	cli(0, "-token", token, "deregister", "csi", "ebs", "a1")
	c.Poll(t, "the handler ran for the registrations and the deregistration", func() (bool, string) {
		envs, _ := filepath.Glob(filepath.Join(out, "*.env"))
		var got []string
		for _, e := range envs {
			b, _ := os.ReadFile(e)
			got = append(got, strings.TrimSpace(string(b)))
		}
		return len(got) >= 3 && slices.Contains(got, "deregistered csi ebs a1") && slices.Contains(got, "registered csi efs b1"), fmt.Sprint(got)
	})
	jsons, _ := filepath.Glob(filepath.Join(out, "*.json"))
	for _, j := range jsons {
		b, _ := os.ReadFile(j)
		var ev api.Event
		if err := json.Unmarshal(b, &ev); err != nil || ev.Index == 0 || !regexp.MustCompile(`/\d+\.json$`).MatchString(j) || filepath.Base(j) != strconv.FormatUint(ev.Index, 10)+".json" {
			t.Fatalf("%s: the event on the handler's stdin: %v\n%s", j, err, b)
		}
	}
}
