package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// Autopilot health: 200 and a failure tolerance of one with three
// healthy servers; a server gone is unhealthy (with the reason) and the
// answer 429; /v1/health tells readiness from liveness; /v1/agent/self
// describes the agent.
func TestAutopilotHealthAndSelf(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	f := c.Followers()[0]
	health := func() (int, api.AutopilotHealth) {
		t.Helper()
		r := call(t, "GET", f.HTTPURL+"/v1/operator/autopilot/health", "")
		var h api.AutopilotHealth
		if err := json.Unmarshal([]byte(r.body), &h); err != nil {
			t.Fatalf("%d %s: %v", r.status, r.body, err)
		}
		return r.status, h
	}
	c.Eventually(30*time.Second, "three healthy servers with the leader's entries", func() bool {
		st, h := health()
		// Healthy allows a lag (api.MaxTrailingLogs): right after the
		// bootstrap a follower is healthy with nothing in its log yet.
		for _, s := range h.Servers {
			if s.LastIndex == 0 {
				return false
			}
		}
		return st == 200 && h.Healthy && h.FailureTolerance == 1 && len(h.Servers) == 3
	})
	_, h := health()
	leaders := 0
	for _, s := range h.Servers {
		if s.Leader {
			leaders++
			if s.LastContact != "0s" || s.ID != h.Leader {
				t.Fatalf("leader %+v; health says leader %q", s, h.Leader)
			}
		}
		if !s.Voter || s.SerfStatus != "alive" || s.LastIndex == 0 || s.IndexLag > api.MaxTrailingLogs {
			t.Fatalf("server %+v", s)
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders in %+v", leaders, h)
	}

	r := call(t, "GET", f.HTTPURL+"/v1/agent/self", "")
	var self api.AgentSelf
	if err := json.Unmarshal([]byte(r.body), &self); r.status != 200 || err != nil {
		t.Fatalf("self: %d %s", r.status, r.body)
	}
	if self.Config.NodeID != f.Config.NodeID || self.Config.Role != api.RoleServer || self.Member == nil || self.Member.Name != f.Config.NodeID ||
		self.Stats["raft"]["state"] != "Follower" || self.Stats["runtime"]["goroutines"] == "" || self.Config.Version == "" {
		t.Fatalf("self: %s", r.body)
	}

	// One follower gone: unhealthy, no tolerance left, 429.
	gone := c.Followers()[1]
	for i, n := range c.Nodes {
		if n == gone {
			c.Kill(i)
		}
	}
	c.Eventually(30*time.Second, "the stopped server unhealthy", func() bool {
		st, h := health()
		for _, s := range h.Servers {
			if s.ID == gone.Config.NodeID {
				return st == 429 && !h.Healthy && !s.Healthy && s.Error != "" && h.FailureTolerance == 0
			}
		}
		return false
	})

	// Readiness and liveness: with two of three servers gone there is no
	// leader; the last one is alive but not ready.
	for i, n := range c.Nodes {
		if n != f && n != gone {
			c.Kill(i)
		}
	}
	c.Eventually(30*time.Second, "no leader on the last server", func() bool {
		r := call(t, "GET", f.HTTPURL+"/v1/health", "")
		return r.status == 503 && strings.Contains(r.body, `"no_leader"`)
	})
	if r := call(t, "GET", f.HTTPURL+"/v1/health?ready", ""); r.status != 503 {
		t.Fatalf("ready without a leader: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", f.HTTPURL+"/v1/health?live", ""); r.status != 200 || !strings.Contains(r.body, `"no_leader"`) {
		t.Fatalf("live without a leader: %d %s", r.status, r.body)
	}
}

// Every agent serves the UI, without a token even under default deny (the
// files hold no data), and sends browsers from / to it.
func TestUIServed(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	u := c.Leader().HTTPURL
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]string{"/": "/ui/", "/ui": "/ui/"} {
		resp, err := noRedirect.Get(u + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != want {
			t.Fatalf("GET %s: %d to %q", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if r := call(t, "GET", u+"/ui/", ""); r.status != 200 || !strings.Contains(r.body, "<title>plugreg</title>") {
		t.Fatalf("GET /ui/: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", u+"/v1/plugins/x", ""); r.status != 403 {
		t.Fatalf("data without a token: %d", r.status)
	}
	if r := call(t, "GET", u+"/nothing", ""); r.status != 404 {
		t.Fatalf("GET /nothing: %d %s", r.status, r.body)
	}
}

// POST /v1/operator/reap/resume takes an operator's token; the leader
// answers its guard's state (nothing held here, so nothing resumed), a
// follower 503 not_leader (it has no guard: plugreg operator reap resume
// asks the leader), a client agent 501.
func TestReapResume(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	cn := c.AddClient(nil)
	r := call(t, "PUT", c.Leader().HTTPURL+"/v1/acl/bootstrap", "")
	var boot struct{ SecretID string }
	if err := json.Unmarshal([]byte(r.body), &boot); r.status != 200 || err != nil {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	root := boot.SecretID
	read, _ := secretOf(t, c.Leader().HTTPURL, root, `[{"Kind":"read"}]`)
	resume := func(u, token string) reply {
		return call(t, "POST", u+"/v1/operator/reap/resume", "", "X-Plugreg-Token", token)
	}

	if r := resume(c.Leader().HTTPURL, read); r.status != 403 || !strings.Contains(r.body, `"permission_denied"`) {
		t.Fatalf("a read token: %d %s", r.status, r.body)
	}
	c.Eventually(30*time.Second, "the leader to answer its guard's state", func() bool {
		r := resume(c.Leader().HTTPURL, root)
		var st api.ReapStatus
		if r.status != 200 || json.Unmarshal([]byte(r.body), &st) != nil {
			return false
		}
		if st.Paused || st.Resumed || st.PauseAbove != 0.55 || st.PauseMinFailed != 3 {
			t.Fatalf("nothing held: %s", r.body)
		}
		return st.Clients == 1
	})
	// Leadership may move meanwhile on a busy machine: ask whoever
	// follows now until one answers as a follower.
	c.Eventually(30*time.Second, "a follower to refuse", func() bool {
		r := resume(c.Followers()[0].HTTPURL, root)
		return r.status == 503 && strings.Contains(r.body, `"not_leader"`)
	})
	// A client agent resolves the token through a server with a stale
	// read: one that has not applied the bootstrap yet answers
	// acl_not_found for a moment (CI saw it once).
	var last reply
	c.Eventually(30*time.Second, "the client agent to know the token", func() bool {
		last = resume(cn.HTTPURL, root)
		return !strings.Contains(last.body, `"acl_not_found"`)
	})
	if last.status != 501 || !strings.Contains(last.body, `"unsupported"`) {
		t.Fatalf("a client agent: %d %s", last.status, last.body)
	}
}

// refusal is an error answer as the HTTP API sends it and as the Go client
// returns it.
type refusal struct {
	status int
	body   httpapi.ErrorBody
	err    error // the Go client's
}

// checkNotFound fails t unless r is a 404 not_found, not applied, with
// message want, and the Go client's error matches api.ErrNotFound and
// carries the same status, code and message.
func checkNotFound(t *testing.T, what string, r refusal, want string) {
	t.Helper()
	if r.status != http.StatusNotFound || r.body.Code != api.CodeNotFound || r.body.Outcome != string(api.NotApplied) || r.body.Error != want {
		t.Fatalf("%s over HTTP: %d %+v, want 404 not_found, not_applied, %q", what, r.status, r.body, want)
	}
	var ae *client.APIError
	if !errors.Is(r.err, api.ErrNotFound) || !errors.As(r.err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Code != api.CodeNotFound || ae.Message != want {
		t.Fatalf("%s through the Go client: %v, want api.ErrNotFound with %q", what, r.err, want)
	}
}

// callRefusal sends method url with the token (if any) and decodes the
// error body.
func callRefusal(t *testing.T, method, url, token string) (int, httpapi.ErrorBody) {
	t.Helper()
	var hdr []string
	if token != "" {
		hdr = []string{"X-Plugreg-Token", token}
	}
	r := call(t, method, url, "", hdr...)
	var body httpapi.ErrorBody
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("%s %s: %d %s: %v", method, url, r.status, r.body, err)
	}
	return r.status, body
}

// Removing a server the leader's Raft configuration does not hold is
// refused in Consul's words, 404 not_found, before anything is proposed:
// the leader's log does not grow (raft would append a configuration entry
// that removes nobody, and answer success).
func TestRemovePeerRefusesAnUnknownID(t *testing.T) {
	// No state checks: nothing but the calls below may append to the log.
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) { cfg.StateCheckInterval = -1 }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const want = `id "nosuch" was not found in the Raft configuration`
	var (
		leader        *testcluster.Node
		before, after string
		r             refusal
	)
	// Leadership may move on a busy machine: a follower answers
	// remove_failed (not the leader); ask the leader of the moment.
	c.Eventually(30*time.Second, "the leader to answer", func() bool {
		leader = c.Leader()
		before = leader.Stats()["last_log_index"]
		r.status, r.body = callRefusal(t, "DELETE", leader.HTTPURL+"/v1/operator/peers/nosuch", "")
		cl, err := client.New(client.Config{Addrs: []string{leader.HTTPURL}})
		if err != nil {
			t.Fatal(err)
		}
		r.err = cl.RemovePeer(ctx, "nosuch")
		after = leader.Stats()["last_log_index"]
		var ae *client.APIError
		return r.body.Code != "remove_failed" && (!errors.As(r.err, &ae) || ae.Code != "remove_failed")
	})
	checkNotFound(t, "DELETE /v1/operator/peers/nosuch", r, want)
	if after != before {
		t.Fatalf("the leader's last log index moved from %s to %s: the removal reached the log", before, after)
	}
	if servers, err := leader.RaftConfiguration(); err != nil || len(servers) != 3 {
		t.Fatalf("configuration after the refusal: %v %v", servers, err)
	}
}
