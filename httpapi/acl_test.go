package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

func plug(typ, name, alloc string) string {
	return fmt.Sprintf(`{"Type":%q,"Name":%q,"AllocID":%q,"ConnectionInfo":{"SocketPath":"/run/p.sock"}}`, typ, name, alloc)
}

// secretOf creates a token through u with the operator token root.
func secretOf(t *testing.T, u, root, policies string) (secret, accessor string) {
	t.Helper()
	r := call(t, "PUT", u+"/v1/acl/token", `{"Description":"test","Policies":`+policies+`}`, "X-Plugreg-Token", root)
	if r.status != 200 {
		t.Fatalf("create token %s: %d %s", policies, r.status, r.body)
	}
	var tok struct{ SecretID, AccessorID string }
	if err := json.Unmarshal([]byte(r.body), &tok); err != nil || tok.SecretID == "" {
		t.Fatalf("create token: %s, %v", r.body, err)
	}
	return tok.SecretID, tok.AccessorID
}

// Under default deny, every route checks its token: each refusal is a 403
// with a clear code, and leaves nothing behind.
func TestACLs(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond, ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	f := c.Followers()[0].HTTPURL // tokens made and used through a follower

	// Before bootstrap nothing but health, the leader and bootstrap.
	if r := call(t, "POST", f+"/v1/plugins", plug("csi", "a", "1")); r.status != 403 || !strings.Contains(r.body, `"permission_denied"`) {
		t.Fatalf("anonymous write before bootstrap: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", f+"/v1/health", ""); r.status != 200 {
		t.Fatalf("health: %d %s", r.status, r.body)
	}
	r := call(t, "PUT", f+"/v1/acl/bootstrap", "")
	var boot struct{ SecretID, AccessorID string }
	if err := json.Unmarshal([]byte(r.body), &boot); r.status != 200 || err != nil || boot.SecretID == "" {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	root := boot.SecretID
	if r := call(t, "PUT", c.Leader().HTTPURL+"/v1/acl/bootstrap", ""); r.status != 409 || !strings.Contains(r.body, `"acl_bootstrapped"`) {
		t.Fatalf("second bootstrap: %d %s", r.status, r.body)
	}
	read, _ := secretOf(t, f, root, `[{"Kind":"read"}]`)
	csiWrite, _ := secretOf(t, f, root, `[{"Kind":"write","Types":["csi-*"]}]`)
	gone, goneAccessor := secretOf(t, f, root, `[{"Kind":"write"}]`)
	if r := call(t, "DELETE", f+"/v1/acl/token/"+goneAccessor, "", "X-Plugreg-Token", root); r.status != 200 || !strings.Contains(r.body, `"deleted"`) {
		t.Fatalf("delete token: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", f+"/v1/plugins", plug("device", "gpu", "g1"), "X-Plugreg-Token", root); r.status != 200 {
		t.Fatalf("root write: %d %s", r.status, r.body)
	}

	tok := func(s string) []string { return []string{"X-Plugreg-Token", s} }
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		code                     string
	}{
		{"no token under default deny reads", "GET", "/v1/plugins/device", "", nil, 403, "permission_denied"},
		{"no token under default deny writes", "POST", "/v1/plugins", plug("csi-node", "x", "1"), nil, 403, "permission_denied"},
		{"an unknown token", "GET", "/v1/plugins/device", "", tok("not-a-token"), 403, "acl_not_found"},
		{"a deleted token", "POST", "/v1/plugins", plug("csi-node", "x", "1"), tok(gone), 403, "acl_not_found"},
		{"a read token writing", "POST", "/v1/plugins", plug("device", "x", "1"), tok(read), 403, "permission_denied"},
		{"a read token deregistering", "DELETE", "/v1/plugins/device/gpu/g1", "", tok(read), 403, "permission_denied"},
		{"a read token reading", "GET", "/v1/plugins/device", "", tok(read), 200, ""},
		{"a write csi-* token registering a device", "POST", "/v1/plugins", plug("device", "x", "1"), tok(csiWrite), 403, "permission_denied"},
		{"a write csi-* token reading devices", "GET", "/v1/plugins/device", "", tok(csiWrite), 403, "permission_denied"},
		{"a write csi-* token registering csi-node", "POST", "/v1/plugins", plug("csi-node", "ebs", "a1"), tok(csiWrite), 200, ""},
		{"a write csi-* token deregistering a node", "DELETE", "/v1/nodes/n1/plugins", "", tok(csiWrite), 403, "permission_denied"},
		{"a read token asking to leave", "PUT", "/v1/agent/leave", "", tok(read), 403, "permission_denied"},
		{"a read token creating a token", "PUT", "/v1/acl/token", `{"Policies":[{"Kind":"operator"}]}`, tok(read), 403, "permission_denied"},
		{"a read token listing tokens", "GET", "/v1/acl/tokens", "", tok(read), 403, "permission_denied"},
		{"a read token saving a snapshot", "GET", "/v1/operator/snapshot", "", tok(read), 403, "permission_denied"},
		{"a write token restoring a snapshot", "PUT", "/v1/operator/snapshot", "x", tok(csiWrite), 403, "permission_denied"},
		{"no token restoring a snapshot", "PUT", "/v1/operator/snapshot", "x", nil, 403, "permission_denied"},
		{"a read token seeing members", "GET", "/v1/members", "", tok(read), 200, ""},
		{"no token seeing members", "GET", "/v1/members", "", nil, 403, "permission_denied"},
		{"a bad policy", "PUT", "/v1/acl/token", `{"Policies":[{"Kind":"admin"}]}`, tok(root), 400, "invalid"},
		{"an operator policy with types", "PUT", "/v1/acl/token", `{"Policies":[{"Kind":"operator","Types":["x"]}]}`, tok(root), 400, "invalid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, tc.method, f+tc.path, tc.body, tc.hdr...)
			if r.status != tc.status || tc.code != "" && !strings.Contains(r.body, `"`+tc.code+`"`) {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			for _, s := range []string{read, csiWrite, gone, root, "not-a-token"} {
				if strings.Contains(r.body, s) {
					t.Fatal("a token's secret is in the answer")
				}
			}
		})
	}
	// Nothing a refusal carried was applied.
	if r := call(t, "GET", f+"/v1/plugins/device", "", tok(root)...); r.status != 200 || strings.Contains(r.body, `"x"`) || !strings.Contains(r.body, `"gpu"`) {
		t.Fatalf("devices after the refusals: %d %s", r.status, r.body)
	}
	// Types and a node's plugins are cut to what the token may read.
	if r := call(t, "GET", f+"/v1/types", "", tok(csiWrite)...); r.status != 200 || r.body != `["csi-node"]` {
		t.Fatalf("types for csi-*: %d %s", r.status, r.body)
	}
	// Listing tokens shows no secret.
	r = call(t, "GET", f+"/v1/acl/tokens", "", tok(root)...)
	if r.status != 200 || strings.Contains(r.body, "Secret") || strings.Contains(r.body, root) || !strings.Contains(r.body, boot.AccessorID) {
		t.Fatalf("token list: %d %s", r.status, r.body)
	}

	// Events: a csi-* token without a type filter sees csi-* changes only,
	// and asking for devices by name is refused.
	if r := call(t, "GET", f+"/v1/events?type=device", "", tok(csiWrite)...); r.status != 403 {
		t.Fatalf("events of devices for csi-*: %d %s", r.status, r.body)
	}
	req, _ := http.NewRequest("GET", f+"/v1/events?index=0", nil)
	req.Header.Set("X-Plugreg-Token", csiWrite)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	call(t, "POST", f+"/v1/plugins", plug("device", "later", "1"), tok(root)...)
	w := call(t, "POST", f+"/v1/plugins", plug("csi-node", "later", "1"), tok(root)...)
	last := w.header.Get("X-Plugreg-Index")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"device"`) {
			t.Fatalf("a csi-* token got a device event: %s", line)
		}
		if strings.Contains(line, `"Index":`+last+`,`) && strings.Contains(line, `"registered"`) {
			return
		}
	}
	t.Fatalf("stream ended before the last write: %v", sc.Err())
}
