package api_test

import (
	"strings"
	"testing"

	"github.com/plugreg/plugreg/api"
)

// A scoped ID is a valid request ID (within MaxRequestIDLen, whatever the
// raw ID's length), the same for the same caller, kind and ID, different
// when any of them differs, and gives the caller's ID back when short
// enough to be kept readable.
func TestScopeRequestID(t *testing.T) {
	long := strings.Repeat("r", api.MaxRequestIDLen)
	base := api.ScopeRequestID("token:a", "register", "id-1")
	for _, tc := range []struct {
		name, scope, kind, id string
		same                  bool
		raw                   string // what UnscopedRequestID gives back
	}{
		{"the same caller, kind and ID", "token:a", "register", "id-1", true, "id-1"},
		{"another caller", "token:b", "register", "id-1", false, "id-1"},
		{"no token", "", "register", "id-1", false, "id-1"},
		{"another kind", "token:a", "deregister", "id-1", false, "id-1"},
		{"another ID", "token:a", "register", "id-2", false, "id-2"},
		{"scope and kind run together", "token:aregister", "", "id-1", false, "id-1"},
		{"the longest raw ID", "token:a", "register", long, false, ""},
	} {
		got := api.ScopeRequestID(tc.scope, tc.kind, tc.id)
		if err := api.ValidateRequestID(got); err != nil {
			t.Errorf("%s: %q: %v", tc.name, got, err)
		}
		if (got == base) != tc.same {
			t.Errorf("%s: %q, base %q: same=%v, want %v", tc.name, got, base, got == base, tc.same)
		}
		if un := api.UnscopedRequestID(got); tc.raw != "" && un != tc.raw {
			t.Errorf("%s: unscoped %q, want %q", tc.name, un, tc.raw)
		}
	}
	if api.ScopeRequestID("token:a", "register", "") != "" {
		t.Error("no request ID was given one")
	}
	if api.UnscopedRequestID("an-old-id") != "an-old-id" {
		t.Error("an unscoped ID (an older release's) changed")
	}
}
