package main

import (
	"os"
	"path/filepath"
	"testing"
)

// countLog counts a mark from an offset on (what a fault logged after it
// began), and afterTime shows the line without its timestamp.
func TestCountLog(t *testing.T) {
	log := "2026-11-25T10:06:00.001Z [INFO]  plugreg.raft: entering follower state\n" +
		"2026-11-25T10:06:00.002Z [WARN]  plugreg.raft: clearing log suffix: node=n2 from=10 to=12\n" +
		"=== harness: start n2\n" +
		"2026-11-25T10:06:01.000Z [WARN]  plugreg.raft: clearing log suffix: node=n2 from=158 to=160\n" +
		"2026-11-25T10:06:01.001Z [ERROR] plugreg.raft: failed to clear log suffix: error=x\n"
	path := filepath.Join(t.TempDir(), "n2.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	second := int64(len(log) - len("2026-11-25T10:06:01.000Z [WARN]  plugreg.raft: clearing log suffix: node=n2 from=158 to=160\n"+
		"2026-11-25T10:06:01.001Z [ERROR] plugreg.raft: failed to clear log suffix: error=x\n"))
	cases := []struct {
		name   string
		from   int64
		needle string
		n      int
		last   string
	}{
		{"whole log", 0, markSuffix, 2, "[WARN]  plugreg.raft: clearing log suffix: node=n2 from=158 to=160"},
		{"from the second", second, markSuffix, 1, "[WARN]  plugreg.raft: clearing log suffix: node=n2 from=158 to=160"},
		{"past the end", int64(len(log)), markSuffix, 0, ""},
		{"another mark", 0, markSnapshot, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, last, err := countLog(path, tc.from, tc.needle)
			if err != nil || n != tc.n || afterTime(last) != tc.last {
				t.Fatalf("countLog(%d, %q) = %d, %q, %v; want %d, %q", tc.from, tc.needle, n, afterTime(last), err, tc.n, tc.last)
			}
		})
	}
	if n, _, err := countLog(filepath.Join(t.TempDir(), "none.log"), 0, markSuffix); err == nil || n != 0 {
		t.Fatalf("a missing log: %d, %v; want an error", n, err)
	}
	if got := afterTime("=== harness: start n2"); got != "=== harness: start n2" {
		t.Fatalf("afterTime of a harness line: %q", got)
	}
}
