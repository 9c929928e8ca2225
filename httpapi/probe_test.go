package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/internal/testing/testcluster"
)

// The probe port's handler answers health, as the API does, and nothing
// else: no token is asked there, so no other route may be reached.
func TestProbeHandlerServesHealthAlone(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	defer c.Shutdown()
	n := c.WaitForLeader()
	probe := n.HTTP.ProbeHandler()
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/v1/health", http.StatusOK},
		{"GET", "/v1/health?live", http.StatusOK},
		{"GET", "/v1/plugins", http.StatusNotFound},
		{"GET", "/v1/metrics", http.StatusNotFound},
		{"GET", "/v1/agent/self", http.StatusNotFound},
		{"GET", "/v1/acl/tokens", http.StatusNotFound},
		{"POST", "/v1/plugins", http.StatusNotFound},
		{"PUT", "/v1/agent/leave", http.StatusNotFound},
		{"GET", "/ui/", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		probe.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.want)
		}
	}
}
