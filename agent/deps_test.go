package agent_test

import (
	"os/exec"
	"strings"
	"testing"
)

// What runs on every host, what it is built from, and the Go client must
// not pull the server in: no Raft, no FSM, no registry, no cluster. (One
// test for all of them; it replaces the client's own.)
func TestHostSideDoesNotImportTheServer(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	for _, pkg := range []string{"agent", "agent/pluginsock", "httpapi", "gossip", "transport", "api", "api/pluginpb", "client", "stub"} {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.Command(goBin, "list", "-deps", "github.com/plugreg/plugreg/"+pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, banned := range []string{"github.com/hashicorp/raft", "github.com/plugreg/plugreg/fsm", "github.com/plugreg/plugreg/registry", "github.com/plugreg/plugreg/cluster"} {
					if dep == banned || strings.HasPrefix(dep, banned+"/") {
						t.Errorf("%s imports %s", pkg, dep)
					}
				}
			}
		})
	}
}

// The internal RPC between client agents and servers (agentrpc) and an
// agent's backend, with a node's shared event encodings (backend), are
// not the public wire vocabulary: the Go client and the SDK do not link
// them.
func TestClientAndStubDoNotImportTheInternalRPC(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	for _, pkg := range []string{"client", "stub", "api", "api/pluginpb"} {
		out, err := exec.Command(goBin, "list", "-deps", "github.com/plugreg/plugreg/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			// agentrpc: the internal RPC; backend: what an agent
			// serves, and a node's event encodings shared by its
			// subscribers.
			if dep == "github.com/plugreg/plugreg/agentrpc" || dep == "github.com/plugreg/plugreg/backend" {
				t.Errorf("%s imports %s", pkg, dep)
			}
		}
	}
}

// The plugin SDK is linked into plugins: of plugreg it takes the wire types
// and the protocol, nothing of the agent.
func TestStubImportsOnlyTheProtocol(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/plugreg/plugreg/stub").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"github.com/plugreg/plugreg/stub": true, "github.com/plugreg/plugreg/api": true,
		"github.com/plugreg/plugreg/api/pluginpb": true, "github.com/plugreg/plugreg/api/pluginrpc": true}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/plugreg/plugreg") && !allowed[dep] {
			t.Errorf("stub imports %s", dep)
		}
		if strings.HasPrefix(dep, "github.com/hashicorp/") {
			t.Errorf("stub imports %s", dep)
		}
	}
}

// The test harness (tests/framework/...) imports the product to start it;
// no product package, binary or example may import the harness, so the
// import graph has no arrow running back up into it.
func TestProductDoesNotImportTheTestHarness(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	// Without -test: the packages as built, not their tests.
	out, err := exec.Command(goBin, "list", "-deps", "github.com/plugreg/plugreg/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	list, err := exec.Command(goBin, "list", "github.com/plugreg/plugreg/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, list)
	}
	harness := "github.com/plugreg/plugreg/tests/framework/"
	product := 0
	for _, pkg := range strings.Fields(string(list)) {
		if strings.HasPrefix(pkg, harness) {
			continue
		}
		product++
		deps, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, deps)
		}
		for _, dep := range strings.Fields(string(deps)) {
			if strings.HasPrefix(dep, harness) {
				t.Errorf("%s imports the test harness %s", pkg, dep)
			}
		}
	}
	if product < 20 || !strings.Contains(string(out), harness) {
		t.Fatalf("%d product packages listed, harness listed: %v: the check saw nothing", product, strings.Contains(string(out), harness))
	}
}
