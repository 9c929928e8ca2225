package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// The unit has what operators rely on, and systemd accepts it.
func TestDistUnit(t *testing.T) {
	b, err := os.ReadFile("../../dist/plugreg.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"Restart=on-failure", "KillSignal=SIGTERM", "ExecStart=/usr/local/bin/plugreg agent -config /etc/plugreg/plugreg.json",
		"ExecReload=/bin/kill -HUP $MAINPID", "StateDirectory=plugreg", "User=plugreg",
		"RestartPreventExitStatus=" + strconv.Itoa(exitDataErr)} {
		if !strings.Contains(unit, "\n"+want+"\n") {
			t.Errorf("the unit lacks %q", want)
		}
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)$`).FindStringSubmatch(unit)
	if m == nil {
		t.Fatal("no TimeoutStopSec")
	}
	if secs, _ := strconv.Atoi(m[1]); time.Duration(secs)*time.Second <= signalStopGrace {
		t.Errorf("TimeoutStopSec=%s: systemd would kill the agent before its own %v bound", m[1], signalStopGrace)
	}
	// The example configs name the data dir the unit provides.
	for _, f := range []string{"server.json", "client.json"} {
		c, _ := os.ReadFile("../../dist/" + f)
		if !strings.Contains(string(c), `"data-dir": "/var/lib/plugreg"`) {
			t.Errorf("%s: data-dir is not the unit's StateDirectory", f)
		}
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		// verify wants the binary ExecStart names; point it at ours.
		bin := proctest.Build(t, "./cmd/plugreg")
		tmp := filepath.Join(t.TempDir(), "plugreg.service")
		os.WriteFile(tmp, []byte(strings.ReplaceAll(unit, "/usr/local/bin/plugreg", bin)), 0o644)
		out, err := exec.Command(sa, "verify", tmp).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "System has not been booted with systemd") {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
		t.Logf("systemd-analyze verify: %s", strings.TrimSpace(string(out)))
	}
}
