package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

func httpJSON(t *testing.T, method, url, token, body string, out interface{}) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("X-Plugreg-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// Through a client agent, ACLs hold twice: the agent checks the HTTP
// request's token (resolved through a server), and the server checks the
// token the agent forwards with each write, so an agent (or anything that
// speaks the RPC) without a token cannot write under default deny; the
// agent token (-acl-agent-token) carries the host's own registrations.
func TestClientAgentACLs(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var boot api.ACLTokenSecret
	if st := httpJSON(t, "PUT", cn.HTTPURL+"/v1/acl/bootstrap", "", "", &boot); st != 200 || boot.SecretID == "" {
		t.Fatalf("bootstrap through the client agent: %d", st)
	}
	var csi, agentTok api.ACLTokenSecret
	if st := httpJSON(t, "PUT", cn.HTTPURL+"/v1/acl/token", boot.SecretID, `{"Policies":[{"Kind":"write","Types":["csi"]}]}`, &csi); st != 200 {
		t.Fatalf("create through the client agent: %d", st)
	}
	if st := httpJSON(t, "PUT", c.Nodes[0].HTTPURL+"/v1/acl/token", boot.SecretID, `{"Description":"agent","Policies":[{"Kind":"write"}]}`, &agentTok); st != 200 {
		t.Fatalf("create agent token: %d", st)
	}

	withToken := func(tok string) *client.Client {
		cl, err := client.New(client.Config{Addrs: []string{cn.HTTPURL}, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	if _, err := withToken(csi.SecretID).Register(ctx, plugin("h", "ebs", "a1")); err != nil {
		t.Fatalf("csi token registering csi through the agent: %v", err)
	}
	dev := plugin("h", "gpu", "g1")
	dev.Type = "device"
	if _, err := withToken(csi.SecretID).Register(ctx, dev); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("csi token registering a device through the agent: %v", err)
	}
	if _, err := withToken("no-such-token").Register(ctx, plugin("h", "x", "1")); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("unknown token through the agent: %v", err)
	}
	// A renewal needs what a write of its type needs: the csi token
	// renews a csi lease (checked at the agent and again at the server),
	// a device lease it may not.
	leasedCSI := plugin("h", "ebs", "l1")
	leasedCSI.TTL = api.Duration(time.Hour)
	if _, err := withToken(csi.SecretID).Register(ctx, leasedCSI); err != nil {
		t.Fatal(err)
	}
	if _, err := withToken(csi.SecretID).Renew(ctx, "csi", "ebs", "l1"); err != nil {
		t.Fatalf("csi token renewing a csi lease through the agent: %v", err)
	}
	if _, err := withToken(csi.SecretID).Renew(ctx, "device", "gpu", "g1"); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("csi token renewing a device lease through the agent: %v", err)
	}
	if _, err := withToken(csi.SecretID).Deregister(ctx, "csi", "ebs", "l1"); err != nil {
		t.Fatal(err)
	}

	// The RPC itself: the agent's in-process backend, with no token in
	// its context and none of its own, is refused by the server.
	if _, err := cn.Client.Register(ctx, plugin("h", "rpc", "1")); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("a write over RPC without a token: %v", err)
	}
	// With the agent token, the host's own registrations go through.
	agentCN := c.AddClient(func(cfg *agent.Config) { cfg.NodeID, cfg.ACLToken = "host2", agentTok.SecretID })
	c.Eventually(20*time.Second, "the second agent to know the servers", func() bool { return len(agentCN.Servers()) == 3 })
	if _, err := agentCN.Client.Register(ctx, dev); err != nil {
		t.Fatalf("a write with the agent token: %v", err)
	}
	// A token's deletion through the agent's RPC keeps its request ID: a
	// retry is answered with the first attempt's result, not a second
	// entry that finds the token gone.
	var doomed api.ACLTokenSecret
	if st := httpJSON(t, "PUT", c.Nodes[0].HTTPURL+"/v1/acl/token", boot.SecretID, `{"Description":"doomed","Policies":[{"Kind":"read"}]}`, &doomed); st != 200 {
		t.Fatalf("create a token to delete: %d", st)
	}
	dctx := api.WithRequestID(api.WithToken(ctx, boot.SecretID), "delete-doomed-1")
	first, err := cn.Client.ACLTokenDelete(dctx, doomed.AccessorID)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := cn.Client.ACLTokenDelete(dctx, doomed.AccessorID)
	if err != nil || retry != first {
		t.Fatalf("a retried deletion with the same request ID: %+v %v, want the first's %+v", retry, err, first)
	}

	// Nothing refused was applied.
	root := client.Config{Addrs: []string{c.Nodes[1].HTTPURL}, Token: boot.SecretID}
	rc, _ := client.New(root)
	list, _, err := rc.List(ctx, "csi", nil)
	if err != nil || len(list) != 1 || list[0].Name != "ebs" {
		t.Fatalf("csi after the refusals: %v %v", list, err)
	}
}

// An agent token bound to its node (api.ACLToken.Node) acts for that node
// alone, whichever edge its writes (and lease renewals) come in by: the
// agent's RPC (the host's own registrations), its HTTP API, or a server's. Without the
// binding the same token deregistered every other host's plugins.
func TestNodeBoundAgentToken(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := c.Nodes[0].HTTPURL
	var boot, host1 api.ACLTokenSecret
	if st := httpJSON(t, "PUT", srv+"/v1/acl/bootstrap", "", "", &boot); st != 200 {
		t.Fatalf("bootstrap: %d", st)
	}
	if st := httpJSON(t, "PUT", srv+"/v1/acl/token", boot.SecretID, `{"Policies":[{"Kind":"operator"}],"Node":"host1"}`, nil); st != 400 {
		t.Fatalf("a node-bound operator token: %d, want 400", st)
	}
	if st := httpJSON(t, "PUT", srv+"/v1/acl/token", boot.SecretID, `{"Description":"agent host1","Policies":[{"Kind":"write"}],"Node":"host1"}`, &host1); st != 200 || host1.Node != "host1" {
		t.Fatalf("create the agent token of host1: %d %+v", st, host1.ACLToken)
	}
	root, err := client.New(client.Config{Addrs: []string{srv}, Token: boot.SecretID})
	if err != nil {
		t.Fatal(err)
	}
	other := plugin("host2", "ebs", "b1")
	if _, err := root.Register(ctx, other); err != nil {
		t.Fatal(err)
	}

	cn := c.AddClient(func(cfg *agent.Config) { cfg.NodeID, cfg.ACLToken = "host1", host1.SecretID })
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	if _, err := cn.Client.Register(ctx, plugin("host1", "ebs", "a1")); err != nil {
		t.Fatalf("the agent registering its own node's plugin: %v", err)
	}
	type refusal struct {
		name string
		do   func() error
		want error
	}
	for _, r := range []refusal{
		{"register for another node (RPC)", func() error { _, err := cn.Client.Register(ctx, plugin("host2", "ebs", "b2")); return err }, api.ErrPermissionDenied},
		{"deregister another node's instance (RPC, made conditional)", func() error {
			_, err := cn.Client.Deregister(ctx, api.DeregisterRequest{Type: "csi", Name: "ebs", AllocID: "b1"})
			return err
		}, api.ErrConflict},
		{"deregister with another node's condition (RPC)", func() error {
			_, err := cn.Client.Deregister(ctx, api.DeregisterRequest{Type: "csi", Name: "ebs", AllocID: "b1", IfNodeID: "host2"})
			return err
		}, api.ErrPermissionDenied},
		{"deregister another node (RPC)", func() error { _, err := cn.Client.DeregisterNode(ctx, "host2"); return err }, api.ErrPermissionDenied},
	} {
		if err := r.do(); !errors.Is(err, r.want) {
			t.Errorf("%s: %v, want %v", r.name, err, r.want)
		}
	}
	// Over HTTP, at the agent and at a server, with the agent token.
	for _, req := range []struct{ method, url string }{
		{"DELETE", cn.HTTPURL + "/v1/nodes/host2/plugins"},
		{"DELETE", srv + "/v1/nodes/host2/plugins"},
		{"DELETE", cn.HTTPURL + "/v1/plugins/csi/ebs/b1?node=host2"},
		{"POST", srv + "/v1/plugins"},
	} {
		body := ""
		if req.method == "POST" {
			b, _ := json.Marshal(plugin("host2", "ebs", "b3"))
			body = string(b)
		}
		if st := httpJSON(t, req.method, req.url, host1.SecretID, body, nil); st != http.StatusForbidden {
			t.Errorf("%s %s with host1's token: %d, want 403", req.method, req.url, st)
		}
	}
	if st := httpJSON(t, "DELETE", srv+"/v1/plugins/csi/ebs/b1", host1.SecretID, "", nil); st != http.StatusConflict {
		t.Errorf("DELETE host2's instance at a server with host1's token: %d, want 409", st)
	}
	// Renewals: a node-bound token renews its own node's leases only,
	// through the agent's RPC and over HTTP at a server alike.
	for _, p := range []*api.PluginInfo{plugin("host1", "lease", "l1"), plugin("host2", "lease", "l2")} {
		p.Type, p.TTL = "leased", api.Duration(time.Hour)
		if _, err := root.Register(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	renew := func(alloc, ifNode string) error {
		_, err := cn.Client.Renew(ctx, api.RenewRequest{Type: "leased", Name: "lease", AllocID: alloc, IfNodeID: ifNode})
		return err
	}
	if err := renew("l1", ""); err != nil {
		t.Errorf("the agent renewing its own node's lease: %v", err)
	}
	if err := renew("l2", ""); !errors.Is(err, api.ErrConflict) {
		t.Errorf("renew another node's lease (RPC, made conditional): %v, want a conflict", err)
	}
	if err := renew("l2", "host2"); !errors.Is(err, api.ErrPermissionDenied) {
		t.Errorf("renew with another node's condition (RPC): %v, want permission denied", err)
	}
	for alloc, want := range map[string]int{"l1": http.StatusOK, "l2": http.StatusConflict} {
		if st := httpJSON(t, "PUT", srv+"/v1/plugins/leased/lease/"+alloc+"/renew", host1.SecretID, "", nil); st != want {
			t.Errorf("renew %s at a server with host1's token: %d, want %d", alloc, st, want)
		}
	}
	// Its own node it may clear.
	if _, err := cn.Client.DeregisterNode(ctx, "host1"); err != nil {
		t.Fatalf("the agent deregistering its own node: %v", err)
	}
	list, _, err := root.List(ctx, "csi", nil)
	if err != nil || len(list) != 1 || list[0].AllocID != "b1" || list[0].NodeID != "host2" {
		t.Fatalf("after the refusals, want host2's b1 alone: %v %v", list, err)
	}
}

// statusErr is the refusal an HTTP status stands for (nil for 200).
func statusErr(st int) error {
	switch st {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return api.ErrConflict
	case http.StatusForbidden:
		return api.ErrPermissionDenied
	}
	return fmt.Errorf("HTTP %d", st)
}

// A node-bound agent token takes nothing over from another node: a
// registration of an instance another node registered (same type, name
// and alloc, the token's node, the attacker's endpoint) is refused with
// 409 where the entry is applied, and so is everything it would have
// carried along (a lease, a health mark), and the deregistration that
// followed a take-over; through every edge a node-bound token writes by.
// Without the condition, the registration answered "updated" and the
// instance pointed at the attacker's endpoint.
func TestNodeBoundTokenTakesNothingOver(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := c.Nodes[0].HTTPURL
	var boot, host1 api.ACLTokenSecret
	if st := httpJSON(t, "PUT", srv+"/v1/acl/bootstrap", "", "", &boot); st != 200 {
		t.Fatalf("bootstrap: %d", st)
	}
	if st := httpJSON(t, "PUT", srv+"/v1/acl/token", boot.SecretID, `{"Description":"agent host1","Policies":[{"Kind":"write"}],"Node":"host1"}`, &host1); st != 200 {
		t.Fatalf("create the agent token of host1: %d", st)
	}
	root, err := client.New(client.Config{Addrs: []string{c.Nodes[1].HTTPURL}, Token: boot.SecretID})
	if err != nil {
		t.Fatal(err)
	}
	cn := c.AddClient(func(cfg *agent.Config) { cfg.NodeID, cfg.ACLToken = "host1", host1.SecretID })
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	// The plugin socket's sessions (and the plugins dir's watcher)
	// register through the agent's Host, over the agent's RPC with the
	// agent token.
	host, stopHost := startHost(t, cn.Client, time.Hour)
	defer stopHost()

	type edge struct {
		name       string
		register   func(t *testing.T, p *api.PluginInfo) error
		renew      func(t *testing.T, alloc string) error // nil: the edge renews nothing
		deregister func(t *testing.T, alloc string) error
		// quietConflict: the edge answers a refused deregistration with
		// success (the Host: another node's instance is not its to
		// remove).
		quietConflict bool
	}
	overHTTP := func(name, url string) edge {
		inst := func(alloc string) string { return url + "/v1/plugins/csi/ebs/" + alloc }
		return edge{
			name: name,
			register: func(t *testing.T, p *api.PluginInfo) error {
				b, _ := json.Marshal(p)
				return statusErr(httpJSON(t, "POST", url+"/v1/plugins", host1.SecretID, string(b), nil))
			},
			renew: func(t *testing.T, alloc string) error {
				return statusErr(httpJSON(t, "PUT", inst(alloc)+"/renew", host1.SecretID, "", nil))
			},
			deregister: func(t *testing.T, alloc string) error {
				return statusErr(httpJSON(t, "DELETE", inst(alloc), host1.SecretID, "", nil))
			},
		}
	}
	edges := []edge{
		overHTTP("HTTP at a server", srv),
		overHTTP("HTTP at the client agent", cn.HTTPURL),
		{
			name: "agent RPC (the agent token)",
			register: func(_ *testing.T, p *api.PluginInfo) error {
				_, err := cn.Client.Register(ctx, p)
				return err
			},
			renew: func(_ *testing.T, alloc string) error {
				_, err := cn.Client.Renew(ctx, api.RenewRequest{Type: "csi", Name: "ebs", AllocID: alloc})
				return err
			},
			deregister: func(_ *testing.T, alloc string) error {
				_, err := cn.Client.Deregister(ctx, api.DeregisterRequest{Type: "csi", Name: "ebs", AllocID: alloc})
				return err
			},
		},
		{
			name: "plugin socket (the agent's Host)",
			register: func(_ *testing.T, p *api.PluginInfo) error {
				_, err := host.Put(ctx, p)
				return err
			},
			deregister: func(_ *testing.T, alloc string) error {
				return host.Deregister(ctx, plugin("host1", "ebs", alloc))
			},
			quietConflict: true,
		},
	}
	type step string
	const (
		register   step = "register host2's instance as host1's"
		renew      step = "renew its lease"
		deregister step = "deregister it"
	)
	kinds := []struct {
		name   string
		victim func(p *api.PluginInfo) // host2's registration
		attack func(p *api.PluginInfo) // host1's copy of it
		steps  []step
	}{
		{"the endpoint", nil, nil, []step{register}},
		{"the lease, then renew it",
			func(p *api.PluginInfo) { p.TTL = api.Duration(time.Hour) },
			func(p *api.PluginInfo) { p.TTL = api.Duration(time.Hour) },
			[]step{register, renew}},
		{"a health mark", nil,
			func(p *api.PluginInfo) {
				p.Health = &api.InstanceHealth{Status: api.HealthSuspect, Check: "probe", Reason: "forged", LastSeen: time.Now().UTC()}
			},
			[]step{register}},
		{"the instance, then deregister it", nil, nil, []step{register, deregister}},
	}
	for i, e := range edges {
		for j, k := range kinds {
			t.Run(e.name+"/"+k.name, func(t *testing.T) {
				alloc := fmt.Sprintf("v%d-%d", i, j)
				victim := plugin("host2", "ebs", alloc)
				if k.victim != nil {
					k.victim(victim)
				}
				if _, err := root.Register(ctx, victim); err != nil {
					t.Fatal(err)
				}
				before, _, err := root.Get(ctx, "csi", "ebs", alloc, nil)
				if err != nil {
					t.Fatal(err)
				}
				attack := plugin("host1", "ebs", alloc)
				attack.ConnectionInfo = &api.ConnectionInfo{Address: "attacker.example:9000"}
				if k.attack != nil {
					k.attack(attack)
				}
				for _, s := range k.steps {
					var err error
					switch s {
					case register:
						err = e.register(t, attack)
					case renew:
						if e.renew == nil {
							continue
						}
						err = e.renew(t, alloc)
					case deregister:
						err = e.deregister(t, alloc)
						if e.quietConflict && err == nil {
							continue
						}
					}
					if !errors.Is(err, api.ErrConflict) {
						t.Errorf("%s: %v, want a conflict", s, err)
					}
				}
				after, _, err := root.Get(ctx, "csi", "ebs", alloc, nil)
				if err != nil {
					t.Fatalf("host2's instance after the attack: %v", err)
				}
				if after.NodeID != "host2" || after.ModifyIndex != before.ModifyIndex || after.ConnectionInfo.Address != "" || after.Health != nil {
					t.Fatalf("host2's instance was changed: %+v, was %+v", after, before)
				}
			})
		}
	}
	// Its own instances a node-bound token still registers over, at
	// every edge.
	for i, e := range edges {
		own := plugin("host1", "ebs", fmt.Sprintf("own%d", i))
		if err := e.register(t, own); err != nil {
			t.Fatalf("%s: a first registration of its own: %v", e.name, err)
		}
		own.Version = "2"
		if err := e.register(t, own); err != nil {
			t.Fatalf("%s: an update of its own: %v", e.name, err)
		}
	}
}
