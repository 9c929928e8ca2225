package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// "." and ".." are refused as names at the edge, with a clear 400, and
// nothing is applied: registered, such an instance was reachable only
// URL-encoded (clients resolve /v1/plugins/csi/../a away).
func TestDotNamesRefusedAtTheEdge(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true}}) // default allow: no token needed
	u := c.Nodes[0].HTTPURL
	body := func(typ, name, alloc, node string) string {
		return `{"Type":"` + typ + `","Name":"` + name + `","AllocID":"` + alloc + `","NodeID":"` + node + `","ConnectionInfo":{"SocketPath":"/s"}}`
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"type .", "POST", "/v1/plugins", body(".", "n", "a", "n1"), http.StatusBadRequest},
		{"name ..", "POST", "/v1/plugins", body("csi", "..", "a", "n1"), http.StatusBadRequest},
		{"alloc .", "POST", "/v1/plugins", body("csi", "n", ".", "n1"), http.StatusBadRequest},
		{"node ..", "POST", "/v1/plugins", body("csi", "n", "a", ".."), http.StatusBadRequest},
		{"a token bound to node .", "PUT", "/v1/acl/token", `{"Policies":[{"Kind":"write"}],"Node":"."}`, http.StatusBadRequest},
		{"name ... is a name", "POST", "/v1/plugins", body("csi", "...", "a", "n1"), http.StatusOK},
	} {
		r := call(t, tc.method, u+tc.path, tc.body, "Content-Type", "application/json")
		if r.status != tc.status || tc.status == http.StatusBadRequest && !strings.Contains(r.body, "are not names") {
			t.Errorf("%s: %d %s; want %d", tc.name, r.status, r.body, tc.status)
		}
	}
	if types := call(t, "GET", u+"/v1/types", ""); types.body != `["csi"]` {
		t.Errorf("types after the refusals: %s; want only csi (of the name ...)", types.body)
	}
}
