package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// /v1/agent/keyring is for operators only; a bad key or a step that would
// cut the agent off is a 400 that names no key and changes nothing; the
// rotation steps change this agent's keyring alone.
func TestKeyringRoute(t *testing.T) {
	oldKey, _ := gossip.GenerateKey()
	newKey, _ := gossip.GenerateKey()
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}, GossipKey: oldKey})
	// Tokens are made through the node the test asks: a write through a
	// follower is applied there before it is acknowledged.
	f := c.Followers()[0].HTTPURL
	u := f + "/v1/agent/keyring"
	r := call(t, "PUT", f+"/v1/acl/bootstrap", "")
	var boot struct{ SecretID string }
	if err := json.Unmarshal([]byte(r.body), &boot); r.status != 200 || err != nil {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	root := []string{"X-Plugreg-Token", boot.SecretID}
	read, _ := secretOf(t, f, boot.SecretID, `[{"Kind":"read"}]`)
	write, _ := secretOf(t, f, boot.SecretID, `[{"Kind":"write"}]`)
	status := func() api.KeyringStatus {
		t.Helper()
		r := call(t, "GET", u, "", root...)
		var st api.KeyringStatus
		if err := json.Unmarshal([]byte(r.body), &st); r.status != 200 || err != nil {
			t.Fatalf("keyring: %d %s", r.status, r.body)
		}
		return st
	}
	if st := status(); st.PrimaryKey != oldKey || len(st.Keys) != 1 || st.Node == "" {
		t.Fatalf("keyring at start: %+v", st)
	}
	body := func(k string) string { return `{"Key":"` + k + `"}` }
	const garbage = "c2VjcmV0LWJ1dC1ub3QtYS1rZXk="
	for _, tc := range []struct {
		name, method, body string
		hdr                []string
		status             int
		code               string
	}{
		{"no token lists", "GET", "", nil, 403, "permission_denied"},
		{"a read token lists", "GET", "", []string{"X-Plugreg-Token", read}, 403, "permission_denied"},
		{"a write token installs", "POST", body(newKey), []string{"X-Plugreg-Token", write}, 403, "permission_denied"},
		{"install a key of the wrong size", "POST", body(garbage), root, 400, "invalid"},
		{"install no key", "POST", `{}`, root, 400, "invalid"},
		{"install a body that is not JSON", "POST", `Key=` + newKey, root, 400, "invalid"},
		{"install an unknown field", "POST", `{"Key":"` + newKey + `","Primary":true}`, root, 400, "invalid"},
		{"install a body too large", "POST", `{"Key":"` + strings.Repeat("A", 8<<10) + `"}`, root, 400, ""},
		{"use a key not installed", "PUT", body(newKey), root, 400, "invalid"},
		{"remove the primary key", "DELETE", body(oldKey), root, 400, "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, tc.method, u, tc.body, tc.hdr...)
			if r.status != tc.status && !(tc.code == "" && r.status == 413) || tc.code != "" && !strings.Contains(r.body, `"`+tc.code+`"`) {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			for _, k := range []string{oldKey, newKey, garbage} {
				if strings.Contains(r.body, k) && tc.status != 200 {
					t.Fatal("a key is in the refusal")
				}
			}
			if st := status(); st.PrimaryKey != oldKey || len(st.Keys) != 1 {
				t.Fatalf("the refusal changed the keyring: %+v", st)
			}
		})
	}

	// The rotation, on this agent alone (the CLI walks every member).
	for _, step := range []struct{ method, key string }{{"POST", newKey}, {"POST", newKey}, {"PUT", newKey}, {"DELETE", oldKey}, {"DELETE", oldKey}} {
		if r := call(t, step.method, u, body(step.key), root...); r.status != 200 {
			t.Fatalf("%s %s: %d %s", step.method, u, r.status, r.body)
		}
	}
	if st := status(); st.PrimaryKey != newKey || len(st.Keys) != 1 {
		t.Fatalf("after the rotation: %+v", st)
	}
	for _, n := range c.Nodes {
		if n.HTTPURL == strings.TrimSuffix(u, "/v1/agent/keyring") {
			continue
		}
		// The bootstrap may still be on its way to this node.
		var r reply
		c.Eventually(10*time.Second, "the operator token on "+n.Config.NodeID, func() bool {
			r = call(t, "GET", n.HTTPURL+"/v1/agent/keyring", "", root...)
			return r.status != 403
		})
		if r.status != 200 || !strings.Contains(r.body, `"PrimaryKey":"`+oldKey+`"`) || strings.Contains(r.body, newKey) {
			t.Fatalf("another agent's keyring changed: %d %s", r.status, r.body)
		}
	}
}

// An agent without gossip encryption says so.
func TestKeyringRouteWithoutEncryption(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	r := call(t, "GET", c.Leader().HTTPURL+"/v1/agent/keyring", "")
	if r.status != 400 || !strings.Contains(r.body, `"gossip_not_encrypted"`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
}
