package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// A request ID answers only its own caller's retries of the same kind of
// write. It was global: a write:csi token's ID, reused by another token
// for a dra registration, answered that one with the csi write's result
// and never applied it; and the csi token's deregistration under its own
// ID was answered "registered". A caller's retries are answered from the
// record wherever they arrive: another server, a client agent (the agent
// forwards the raw ID and the server scopes it once).
func TestRequestIDsScopedToCallerAndCommand(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond, ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	follower, leader := c.Followers()[0].HTTPURL, c.Leader().HTTPURL
	agent := c.AddClient(nil).HTTPURL
	r := call(t, "PUT", follower+"/v1/acl/bootstrap", "")
	var boot struct{ SecretID string }
	if err := json.Unmarshal([]byte(r.body), &boot); r.status != 200 || err != nil {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	tokens := map[string]string{}
	tokens["csi"], _ = secretOf(t, follower, boot.SecretID, `[{"Kind":"write","Types":["csi"]}]`)
	tokens["dra"], _ = secretOf(t, follower, boot.SecretID, `[{"Kind":"write","Types":["dra"]}]`)

	const id = "reused-id"
	steps := []struct {
		name, via, token, method, path, body string
		result                               api.Result
		// answeredAs names the step whose index this one must be answered
		// with (from the record); "" wants a write of its own.
		answeredAs string
	}{
		{"csi token registers", follower, "csi", "POST", "/v1/plugins", plug("csi", "a", "1"), api.ResultRegistered, ""},
		{"dra token, same ID, registers its own", follower, "dra", "POST", "/v1/plugins", plug("dra", "b", "1"), api.ResultRegistered, ""},
		{"csi token retries on the leader", leader, "csi", "POST", "/v1/plugins", plug("csi", "a", "1"), api.ResultRegistered, "csi token registers"},
		{"csi token retries through a client agent", agent, "csi", "POST", "/v1/plugins", plug("csi", "a", "1"), api.ResultRegistered, "csi token registers"},
		{"dra token retries through a client agent", agent, "dra", "POST", "/v1/plugins", plug("dra", "b", "1"), api.ResultRegistered, "dra token, same ID, registers its own"},
		{"csi token, same ID, deregisters", follower, "csi", "DELETE", "/v1/plugins/csi/a/1", "", api.ResultDeregistered, ""},
	}
	index := map[string]uint64{}
	var last uint64
	for _, st := range steps {
		var res api.WriteResult
		c.Eventually(10*time.Second, st.name+" (the client agent reaches a server)", func() bool {
			r = call(t, st.method, st.via+st.path, st.body, "X-Plugreg-Token", tokens[st.token], "X-Plugreg-Request-Id", id, "Content-Type", "application/json")
			return r.status != http.StatusServiceUnavailable
		})
		if err := json.Unmarshal([]byte(r.body), &res); r.status != 200 || err != nil {
			t.Fatalf("%s: %d %s", st.name, r.status, r.body)
		}
		want := "a write of its own"
		ok := res.Index > last
		if st.answeredAs != "" {
			want, ok = "the index of "+st.answeredAs, res.Index == index[st.answeredAs]
		}
		if !ok || res.Result != st.result {
			t.Fatalf("%s: %+v; want %s, %s (earlier writes: %v)", st.name, res, st.result, want, index)
		}
		index[st.name], last = res.Index, max(last, res.Index)
	}
	for _, g := range []struct {
		path   string
		status int
	}{
		{"/v1/plugins/dra/b/1", http.StatusOK},
		{"/v1/plugins/csi/a/1", http.StatusNotFound},
	} {
		if r := call(t, "GET", leader+g.path, "", "X-Plugreg-Token", boot.SecretID); r.status != g.status {
			t.Errorf("GET %s: %d %s; want %d", g.path, r.status, r.body, g.status)
		}
	}
}
