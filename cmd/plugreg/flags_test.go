package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"sigs.k8s.io/yaml"
)

func TestSuggest(t *testing.T) {
	commands := []string{"list", "leader", "leave", "members", "register", "deregister", "get", "types"}
	cases := []struct{ word, want string }{
		{"lst", "list"},
		{"lsit", "list"}, // neighbours swapped
		{"regster", "register"},
		{"mem", "members"}, // a prefix
		{"tpyes", "types"},
		{"get", "get"},
		{"x", ""},
		{"agentt", ""}, // nothing near
		{"delete", ""},
	}
	for _, tc := range cases {
		if got := suggest(tc.word, commands); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
}

// Flags written before the command are handed to it; a bool takes no
// value, others take the next word or their own =value.
func TestHoistGlobalFlags(t *testing.T) {
	cases := []struct {
		args, globals, rest []string
	}{
		{[]string{"list", "csi"}, nil, []string{"list", "csi"}},
		{[]string{"-addr", "a:1", "list", "csi"}, []string{"-addr", "a:1"}, []string{"list", "csi"}},
		{[]string{"--json", "-o=yaml", "get", "csi", "ebs"}, []string{"--json", "-o=yaml"}, []string{"get", "csi", "ebs"}},
		{[]string{"-no-headers", "-token", "t", "list", "-addr", "b:2", "csi"}, []string{"-no-headers", "-token", "t"}, []string{"list", "-addr", "b:2", "csi"}},
		{[]string{"-h"}, nil, []string{"-h"}},
	}
	for _, tc := range cases {
		g, r, err := hoistGlobalFlags(tc.args)
		if err != nil || !reflect.DeepEqual(g, tc.globals) || !reflect.DeepEqual(r, tc.rest) {
			t.Errorf("hoist %q = %q %q %v, want %q %q", tc.args, g, r, err, tc.globals, tc.rest)
		}
	}
}

// YAML output keeps strings YAML would read as something else (a plugin
// named "null", an alloc "~", a version "1.10", a node "true"): quoted,
// so that they read back as the same strings.
func TestYAMLKeepsStrings(t *testing.T) {
	in := []*api.PluginInfo{{Type: "csi", Name: "null", AllocID: "~", Version: "1.10", NodeID: "true",
		ConnectionInfo: &api.ConnectionInfo{Address: "no"}}}
	o := output{format: "yaml"}
	var b bytes.Buffer
	if err := o.write(&b, in, nil); err != nil {
		t.Fatal(err)
	}
	var out []*api.PluginInfo
	if err := yaml.UnmarshalStrict(b.Bytes(), &out); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("%v: wrote\n%s\nread back %+v", err, b.String(), out[0])
	}
}

// The bash script completes the tree's words (plugreg acl to<TAB>:
// token) and asks the binary for a command's flags; zsh runs the same
// script, and fish's script names every inner node of the tree.
func TestCompletionScripts(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cases := []struct {
		words []string // COMP_WORDS, the last one being completed
		want  string
	}{
		{[]string{"plugreg", "li"}, "list"},
		{[]string{"plugreg", "acl", "to"}, "token"},
		{[]string{"plugreg", "operator", "raft", "remove"}, "remove-peer"},
		{[]string{"plugreg", "completion", "fi"}, "fish"},
	}
	for _, tc := range cases {
		script := bashScript() + fmt.Sprintf("\nCOMP_WORDS=(%s); COMP_CWORD=%d; _plugreg; echo \"${COMPREPLY[*]}\"\n",
			strings.Join(tc.words, " "), len(tc.words)-1)
		out, err := exec.Command(bash, "-c", script).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.words, out, err, tc.want)
		}
	}
	if fishBin, err := exec.LookPath("fish"); err == nil {
		// The binary answers -h for the flags: this test's own binary
		// cannot, so only the words are checked here.
		for _, tc := range cases {
			script := fishScript() + fmt.Sprintf("\ncomplete -C%q\n", strings.Join(tc.words, " "))
			out, err := exec.Command(fishBin, "--no-config", "-c", script).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != tc.want {
				t.Errorf("fish %q: %q %v, want %q", tc.words, out, err, tc.want)
			}
		}
	}
	fish := fishScript()
	for path := range subcommands() {
		if !strings.Contains(fish, fmt.Sprintf("'__plugreg_after %s'", path)) {
			t.Errorf("fish: no completion after %q", path)
		}
	}
	if !strings.Contains(zshScript(), bashScript()) {
		t.Error("zsh does not run the bash script")
	}
}

// The name snapshot save gives in a directory is one -retain reads back,
// with its time and index.
func TestSnapshotNameReadsBack(t *testing.T) {
	taken := time.Date(2026, 11, 29, 3, 8, 49, 0, time.UTC)
	name := fmt.Sprintf(snapshotNameFormat, taken.Format(snapshotTimeLayout), 10)
	m := snapshotName.FindStringSubmatch(name)
	if m == nil || m[1] != "20261129T030849Z" || m[2] != "10" {
		t.Fatalf("%s read back as %q", name, m)
	}
}
