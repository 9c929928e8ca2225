package main

import (
	"reflect"
	"testing"
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
