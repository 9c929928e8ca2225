package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// DELETE /v1/acl/token/{accessor} of an accessor the cluster does not
// hold is refused in Consul's words, 404 not_found, before anything is
// proposed (it answered 200 "absent" through a log entry); a token that
// exists is deleted, once: deleting it again is the same 404, while a
// retry with the first attempt's request ID is answered the first
// attempt's result.
func TestACLTokenDeleteRefusesAnUnknownAccessor(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true},
		Modify: func(_ int, cfg *cluster.Config) { cfg.StateCheckInterval = -1 }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := call(t, "PUT", c.Leader().HTTPURL+"/v1/acl/bootstrap", "")
	var boot struct{ SecretID string }
	if err := json.Unmarshal([]byte(r.body), &boot); r.status != 200 || err != nil {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	root := boot.SecretID
	f := c.Followers()[0].HTTPURL
	// The follower resolves tokens from its own state: wait until it has
	// applied the bootstrap.
	c.Eventually(30*time.Second, "the follower to know the root token", func() bool {
		return call(t, "GET", f+"/v1/acl/token/self", "", "X-Plugreg-Token", root).status == 200
	})
	cl, err := client.New(client.Config{Addrs: []string{f}, Token: root})
	if err != nil {
		t.Fatal(err)
	}

	leader := c.Leader()
	before := leader.Stats()["last_log_index"]
	var nosuch refusal
	nosuch.status, nosuch.body = callRefusal(t, "DELETE", f+"/v1/acl/token/nosuch", root)
	_, nosuch.err = cl.ACLTokenDelete(ctx, "nosuch")
	checkNotFound(t, "DELETE /v1/acl/token/nosuch", nosuch, `Cannot find token "nosuch"`)
	if after := leader.Stats()["last_log_index"]; c.Leader() == leader && after != before {
		t.Fatalf("the leader's last log index moved from %s to %s: the deletion reached the log", before, after)
	}

	_, accessor := secretOf(t, f, root, `[{"Kind":"read"}]`)
	if r := call(t, "DELETE", f+"/v1/acl/token/"+accessor, "", "X-Plugreg-Token", root); r.status != 200 || !strings.Contains(r.body, `"deleted"`) {
		t.Fatalf("delete a token: %d %s", r.status, r.body)
	}
	var again refusal
	again.status, again.body = callRefusal(t, "DELETE", f+"/v1/acl/token/"+accessor, root)
	_, again.err = cl.ACLTokenDelete(ctx, accessor)
	checkNotFound(t, "a deleted token deleted again", again, `Cannot find token "`+accessor+`"`)

	_, accessor = secretOf(t, f, root, `[{"Kind":"read"}]`)
	first := call(t, "DELETE", f+"/v1/acl/token/"+accessor, "", "X-Plugreg-Token", root, "X-Plugreg-Request-Id", "delete-1")
	retry := call(t, "DELETE", f+"/v1/acl/token/"+accessor, "", "X-Plugreg-Token", root, "X-Plugreg-Request-Id", "delete-1")
	if first.status != 200 || !strings.Contains(first.body, `"deleted"`) || retry.status != 200 || retry.body != first.body {
		t.Fatalf("a deletion and its retry with the same request ID: %d %s, then %d %s", first.status, first.body, retry.status, retry.body)
	}
}

// A server that has not applied a token's creation does not say the token
// does not exist: it refuses only after the leader's commit index, and
// cannot answer (503) while it cannot reach the leader. Here a follower
// is cut off while the token is created: it answers 503 until the
// partition heals, then deletes the token.
func TestACLTokenDeleteThroughALaggingServer(t *testing.T) {
	// Default allow: the follower needs no token of its own state to
	// serve the call.
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true}})
	var fi int
	for i, n := range c.Nodes {
		if n == c.Followers()[0] {
			fi = i
		}
	}
	c.Partition(fi)
	var accessor string
	c.Eventually(30*time.Second, "a token created on the majority's side", func() bool {
		leader := c.Leader()
		if leader == c.Nodes[fi] {
			return false
		}
		r := call(t, "PUT", leader.HTTPURL+"/v1/acl/token", `{"Policies":[{"Kind":"read"}]}`)
		var tok struct{ AccessorID string }
		if r.status != 200 || json.Unmarshal([]byte(r.body), &tok) != nil {
			return false
		}
		accessor = tok.AccessorID
		return true
	})
	lagging := c.Nodes[fi]
	if _, ok := lagging.State().ACLToken(accessor); ok {
		t.Fatal("the cut-off follower applied the token's creation")
	}
	// Once it knows no leader it says so at once (no_leader), rather
	// than at the end of the write's deadline.
	c.Eventually(30*time.Second, "the cut-off follower to lose the leader", func() bool { return lagging.Leader() == "" })
	if r := call(t, "DELETE", lagging.HTTPURL+"/v1/acl/token/"+accessor, ""); r.status != http.StatusServiceUnavailable {
		t.Fatalf("delete through the cut-off follower: %d %s, want 503", r.status, r.body)
	}
	c.Heal()
	var last reply
	c.Eventually(30*time.Second, "the follower to answer again", func() bool {
		last = call(t, "DELETE", lagging.HTTPURL+"/v1/acl/token/"+accessor, "")
		return last.status != http.StatusServiceUnavailable
	})
	if last.status != 200 || !strings.Contains(last.body, `"deleted"`) {
		t.Fatalf("delete through the healed follower: %d %s", last.status, last.body)
	}
}
