package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `tls ca create` never replaces a CA, nor a key left without its
// certificate, and says which; an empty key with no certificate (what a
// power cut left of an older release's plain write) is created over.
func TestTLSCACreateOverWhatIsThere(t *testing.T) {
	cases := []struct {
		name        string
		cert, key   *string // contents before the create; nil: absent
		wantErr     string  // empty: the create succeeds
		wantSameKey bool    // the key file is left as it was
	}{
		{"nothing", nil, nil, "", false},
		{"an empty key alone", nil, ptr(""), "", false},
		{"a key alone", nil, ptr("KEY"), "exists without its certificate", true},
		{"both", ptr("CERT"), ptr("KEY"), caCertName + " exists", true},
		{"a certificate alone", ptr("CERT"), nil, caCertName + " exists", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			certPath, keyPath := filepath.Join(dir, caCertName), filepath.Join(dir, caKeyName)
			for path, c := range map[string]*string{certPath: tc.cert, keyPath: tc.key} {
				if c != nil {
					if err := os.WriteFile(path, []byte(*c), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			err := runTLSCACreate([]string{"-dir", dir})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			}
			key, _ := os.ReadFile(keyPath)
			if tc.wantSameKey && string(key) != *tc.key {
				t.Fatalf("the key was replaced: %q", key)
			}
			if tc.wantErr == "" && !strings.Contains(string(key), "PRIVATE KEY") {
				t.Fatalf("no key written: %q", key)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp*")); len(left) != 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
}

func ptr(s string) *string { return &s }
