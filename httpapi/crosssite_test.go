package httpapi_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// What a web page at another origin can make a browser send blind (a
// simple request: a POST with a form's or text/plain body, or none) is
// refused, and changes nothing: with ACLs off (the default) it registered
// a plugin, and with ACLs on it could burn the ACL bootstrap. A request
// from the agent's own origin, or from a program (no Origin), with a JSON
// body or none, is served.
func TestCrossSiteRequestsRefused(t *testing.T) {
	for _, acl := range []bool{false, true} {
		t.Run(map[bool]string{false: "ACLs off", true: "ACLs on"}[acl], func(t *testing.T) { testCrossSite(t, acl) })
	}
}

type crossSiteCase struct {
	name, method, path, body string
	hdr                      []string
	status                   int
}

func testCrossSite(t *testing.T, acl bool) {
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: acl}})
	base := c.Nodes[0].HTTPURL
	self := "http://" + must(url.Parse(base)).Host
	cases := []crossSiteCase{
		{"a form's POST from another site", "POST", "/v1/plugins", plug("csi", "evil", "1"), []string{"Origin", "https://evil.example", "Content-Type", "application/x-www-form-urlencoded"}, 403},
		{"text/plain from another site", "POST", "/v1/plugins", plug("csi", "evil", "2"), []string{"Origin", "https://evil.example", "Content-Type", "text/plain;charset=UTF-8"}, 403},
		{"an opaque origin", "POST", "/v1/plugins", plug("csi", "evil", "3"), []string{"Origin", "null", "Content-Type", "application/json"}, 403},
		{"text/plain without an Origin (curl -d)", "POST", "/v1/plugins", plug("csi", "evil", "4"), []string{"Content-Type", "text/plain"}, 400},
		{"multipart", "POST", "/v1/plugins", plug("csi", "evil", "5"), []string{"Content-Type", "multipart/form-data; boundary=x"}, 400},
		{"JSON from the agent's own origin", "POST", "/v1/plugins", plug("csi", "ok", "1"), []string{"Origin", self, "Content-Type", "application/json"}, 200},
		{"JSON from a program", "POST", "/v1/plugins", plug("csi", "ok", "2"), []string{"Content-Type", "application/json"}, 200},
		{"no body type from a program", "POST", "/v1/plugins", plug("csi", "ok", "3"), nil, 200},
		{"a cross-site GET is a read", "GET", "/v1/plugins/csi", "", []string{"Origin", "https://evil.example"}, 200},
	}
	if acl {
		cases = append(cases, crossSiteCase{"a bodyless POST from another site burns no bootstrap", "POST", "/v1/acl/bootstrap", "", []string{"Origin", "https://evil.example"}, 403})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if r := call(t, tc.method, base+tc.path, tc.body, tc.hdr...); r.status != tc.status {
				t.Fatalf("%s %s: %d %s; want %d", tc.method, tc.path, r.status, r.body, tc.status)
			}
		})
	}
	st := c.Nodes[0].State()
	if st.Newest("csi", "evil") != nil || st.ACLBootstrapped() != 0 {
		t.Fatal("a refused request changed the state")
	}
	if !acl {
		return
	}
	if r := call(t, "PUT", base+"/v1/acl/bootstrap", ""); r.status != 200 || !strings.Contains(r.body, "SecretID") {
		t.Fatalf("the bootstrap after the refused one: %d %s", r.status, r.body)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
