package api_test

import (
	"testing"

	"github.com/plugreg/plugreg/api"
)

// "." and ".." are refused as new identifiers, and still accepted where
// a log entry is decoded (ValidateIdentifier), so an older release's entry
// applies as it did.
func TestValidateNewIdentifier(t *testing.T) {
	for _, tc := range []struct {
		v           string
		new, decode bool // accepted by ValidateNewIdentifier, by ValidateIdentifier
	}{
		{".", false, true},
		{"..", false, true},
		{"...", true, true},
		{".a", true, true},
		{"a..b", true, true},
		{"", false, false},
		{"a/b", false, false},
	} {
		if got := api.ValidateNewIdentifier("name", tc.v) == nil; got != tc.new {
			t.Errorf("ValidateNewIdentifier(%q) accepted=%v, want %v", tc.v, got, tc.new)
		}
		if got := api.ValidateIdentifier("name", tc.v) == nil; got != tc.decode {
			t.Errorf("ValidateIdentifier(%q) accepted=%v, want %v", tc.v, got, tc.decode)
		}
	}
}
