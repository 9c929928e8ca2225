package httpapi_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// coverageOf reads GET u/v1/coverage/csi plus query.
func coverageOf(t *testing.T, u, query string, hdr ...string) (api.Coverage, reply) {
	t.Helper()
	r := call(t, "GET", u+"/v1/coverage/csi"+query, "", hdr...)
	var cov api.Coverage
	if r.status == 200 {
		if err := json.Unmarshal([]byte(r.body), &cov); err != nil {
			t.Fatalf("coverage body %s: %v", r.body, err)
		}
	}
	return cov, r
}

// gaugeOf returns the last value the sink holds of
// plugreg_coverage_nodes{node,type="csi",state}, and whether it has one.
func gaugeOf(sink *metrics.InmemSink, node, state string) (float32, bool) {
	key := fmt.Sprintf("plugreg.coverage.nodes;node=%s;type=csi;state=%s", node, state)
	data := sink.Data()
	for i := len(data) - 1; i >= 0; i-- {
		data[i].RLock()
		g, ok := data[i].Gauges[key]
		data[i].RUnlock()
		if ok {
			return g.Value, true
		}
	}
	return 0, false
}

// A three-server cluster with two client agents: client1 runs the CSI
// plugin, client2 does not, node1 runs another instance of the same
// plugin name, and "ghost" (no member) has one registered through the
// API. Coverage says so through a server, through a client agent (which
// reads the instances through a server and the members from its own
// gossip) and stale on a follower; the leader's gauge counts the same.
// Killed, client1 is suspect while its instance is still registered, and
// in no list once it is reaped. Before this, no route answered (404).
func TestCoverage(t *testing.T) {
	sink := metrics.NewInmemSink(10*time.Second, time.Minute)
	conf := metrics.DefaultConfig("plugreg")
	conf.EnableHostname, conf.EnableRuntimeMetrics = false, false
	if _, err := metrics.NewGlobal(conf, sink); err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) {
		cfg.NodeReapAfter = 3 * time.Second
	}})
	c1, c2 := c.AddClient(nil), c.AddClient(nil)
	inst := func(name, node string) *api.PluginInfo {
		return &api.PluginInfo{Type: "csi", Name: name, AllocID: "a-" + node, NodeID: node, ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/csi.sock"}}
	}
	for _, p := range []*api.PluginInfo{inst("ebs", c1.Config.NodeID), inst("ebs", "node1"), inst("legacy", "ghost")} {
		c.Register(c.Leader(), p)
	}

	all := api.Coverage{Type: "csi", Nodes: 5, Covered: []string{"client1", "node1"}, Missing: []string{"client2", "node2", "node3"},
		Suspect: []string{}, Orphaned: []string{"ghost"}, OrphanedInstances: 1}
	clients := api.Coverage{Type: "csi", Role: api.RoleClient, Nodes: 2, Covered: []string{"client1"}, Missing: []string{"client2"},
		Suspect: []string{}, Orphaned: []string{"ghost"}, OrphanedInstances: 1}
	servers := api.Coverage{Type: "csi", Role: api.RoleServer, Nodes: 3, Covered: []string{"node1"}, Missing: []string{"node2", "node3"},
		Suspect: []string{}, Orphaned: []string{"ghost"}, OrphanedInstances: 1}
	cases := []struct {
		name, url, query string
		want             api.Coverage
	}{
		{"the leader, every member", c.Leader().HTTPURL, "", all},
		{"a follower, stale", c.Followers()[0].HTTPURL, "?consistency=stale", all},
		{"a client agent without the plugin", c2.HTTPURL, "", all},
		{"a client agent, clients only", c2.HTTPURL, "?role=client", clients},
		{"a server, servers only", c.Leader().HTTPURL, "?role=server", servers},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// want's lists are sorted: DeepEqual checks the order too.
			c.Eventually(30*time.Second, "coverage "+tc.name, func() bool {
				got, r := coverageOf(t, tc.url, tc.query)
				return r.status == 200 && reflect.DeepEqual(got, tc.want)
			})
		})
	}
	if _, r := coverageOf(t, c.Leader().HTTPURL, "?role=voter"); r.status != 400 {
		t.Fatalf("role=voter: %d %s, want 400", r.status, r.body)
	}

	leader := c.Leader().Config.NodeID
	c.Eventually(30*time.Second, "the coverage gauges", func() bool {
		cov, _ := gaugeOf(sink, leader, "covered")
		miss, _ := gaugeOf(sink, leader, "missing")
		susp, ok := gaugeOf(sink, leader, "suspect")
		return cov == 2 && miss == 3 && susp == 0 && ok
	})

	c1.Kill()
	c.Eventually(60*time.Second, "client1 suspect: failed in gossip, its instance still registered", func() bool {
		got, r := coverageOf(t, c.Leader().HTTPURL, "")
		return r.status == 200 && reflect.DeepEqual(got.Suspect, []string{"client1"}) &&
			reflect.DeepEqual(got.Covered, []string{"node1"}) && got.Nodes == 4
	})
	c.Eventually(60*time.Second, "client1 reaped: in no list", func() bool {
		got, r := coverageOf(t, c.Leader().HTTPURL, "")
		return r.status == 200 && len(got.Suspect) == 0 &&
			reflect.DeepEqual(got.Covered, []string{"node1"}) && reflect.DeepEqual(got.Missing, []string{"client2", "node2", "node3"})
	})
}

// Coverage of a type needs what listing it needs: under default deny a
// token that reads csi gets it, one that reads only dra gets 403 like its
// list, and no token 403.
func TestCoverageACL(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	u := c.Leader().HTTPURL
	r := call(t, "PUT", u+"/v1/acl/bootstrap", "")
	var boot struct{ SecretID string }
	if err := json.Unmarshal([]byte(r.body), &boot); r.status != 200 || err != nil {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	csi, _ := secretOf(t, u, boot.SecretID, `[{"Kind":"read","Types":["csi"]}]`)
	dra, _ := secretOf(t, u, boot.SecretID, `[{"Kind":"read","Types":["dra"]}]`)
	for _, tc := range []struct {
		name, token string
		status      int
	}{{"read csi", csi, 200}, {"read dra", dra, 403}, {"no token", "", 403}} {
		list := call(t, "GET", u+"/v1/plugins/csi", "", "X-Plugreg-Token", tc.token)
		cov, r := coverageOf(t, u, "", "X-Plugreg-Token", tc.token)
		if r.status != tc.status || list.status != tc.status {
			t.Fatalf("%s: coverage %d %s, list %d; want both %d", tc.name, r.status, r.body, list.status, tc.status)
		}
		if tc.status == 200 && !reflect.DeepEqual(cov.Missing, []string{"node1"}) {
			t.Fatalf("%s: %s, want node1 missing (the members are shown)", tc.name, r.body)
		}
	}
}

// A server with RequiredTypes (-required-plugin-types) is not ready while
// its own node has no instance of csi, and ready once it has; liveness
// answers 200 throughout. Before, it was ready at once.
func TestServerRequiredTypes(t *testing.T) {
	addr := serveWith(t, httpapi.Config{RequiredTypes: []string{"csi"}})
	u := "http://" + addr
	health := func(query string) (int, api.Health) {
		r := call(t, "GET", u+"/v1/health"+query, "")
		var h api.Health
		if err := json.Unmarshal([]byte(r.body), &h); err != nil {
			t.Fatalf("health %s: %v", r.body, err)
		}
		return r.status, h
	}
	if code, h := health(""); code != 503 || h.Status != "missing_required_types" || !reflect.DeepEqual(h.MissingTypes, []string{"csi"}) || h.Node != "node1" {
		t.Fatalf("before: %d %+v", code, h)
	}
	if code, _ := health("?live"); code != 200 {
		t.Fatalf("liveness: %d", code)
	}
	// Another node's instance does not make this one ready, nor does a
	// suspect instance of its own.
	for _, step := range []struct{ node, health string }{
		{"elsewhere", ""},
		{"node1", `,"Health":{"Status":"suspect","Check":"external","LastSeen":"2026-11-26T00:00:00Z"}`},
		{"node1", ""},
	} {
		body := fmt.Sprintf(`{"Type":"csi","Name":"ebs","AllocID":%q,"NodeID":%q,"ConnectionInfo":{"SocketPath":"/run/ebs.sock"}%s}`, step.node, step.node, step.health)
		if r := call(t, "POST", u+"/v1/plugins", body); r.status != 200 {
			t.Fatalf("register on %s: %d %s", step.node, r.status, r.body)
		}
		if step.node == "elsewhere" || step.health != "" {
			if code, h := health(""); code != 503 {
				t.Fatalf("with %s's instance %s: %d %+v", step.node, step.health, code, h)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, h := health("")
		if code == 200 && h.Status == "ok" && len(h.MissingTypes) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after node1's instance: %d %+v", code, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
