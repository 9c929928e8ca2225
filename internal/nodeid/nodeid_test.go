package nodeid_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/internal/nodeid"
)

func TestClaim(t *testing.T) {
	cases := []struct {
		name    string
		file    *string // the node-id file before the claim (nil: none)
		id      string
		wantErr string
		want    string // the file after
	}{
		{"new dir", nil, "n1", "", "n1\n"},
		{"same id", ptr("n1\n"), "n1", "", "n1\n"},
		{"same id, no newline", ptr("n1"), "n1", "", "n1"},
		{"other id", ptr("n2\n"), "n1", `belongs to node "n2"`, "n2\n"},
		// What an older release's plain write could leave after a power cut.
		{"empty file", ptr(""), "n1", "", "n1\n"},
		{"blank file", ptr("\n"), "n1", "", "n1\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "node-id")
			if tc.file != nil {
				if err := os.WriteFile(path, []byte(*tc.file), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			err := nodeid.Claim(dir, tc.id)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != tc.want {
				t.Fatalf("file %q (%v), want %q", b, err, tc.want)
			}
			left, _ := filepath.Glob(filepath.Join(dir, ".node-id.tmp*"))
			if len(left) > 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
}

func ptr(s string) *string { return &s }
