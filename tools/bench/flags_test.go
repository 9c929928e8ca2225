package main

import (
	"strings"
	"testing"
)

// Flags that cannot run are refused before anything starts.
func TestParseFlagsRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-profile", "/tmp/p", "-profile-workload", "list"}, "-profile-workload"},
		{[]string{"-member-disk-sync", "-1ms"}, "-member-disk-sync"},
		{[]string{"-member-disk-sync", "1ms", "-agents", "3"}, "-member-disk-sync"},
		{[]string{"-member-disk-sync", "1ms", "-stability"}, "-member-disk-sync"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"-member-disk-sync", "1ms", "-profile-workload", "watch"}); err != nil {
		t.Errorf("a valid set refused: %v", err)
	}
}
