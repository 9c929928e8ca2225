package main

import (
	"bytes"
	"reflect"
	"testing"

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
