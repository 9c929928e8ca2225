package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Clients and plugins must not carry the server: the client's import graph
// has no raft, no FSM, no registry and no cluster.
func TestClientDoesNotImportTheServer(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/plugreg/plugreg/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/hashicorp/raft", "github.com/plugreg/plugreg/fsm", "github.com/plugreg/plugreg/registry", "github.com/plugreg/plugreg/cluster"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("the client imports %s", pkg)
			}
		}
	}
}
