package pluginsock_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/agent/pluginsock"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// A plugin on the socket of a client agent whose agent token is bound to
// its node takes over no instance another node holds: its registration is
// conditional on the agent's node and refused (409) where it is applied,
// and the session reports it pending. Here the instance with the alloc ID
// the socket derives for the plugin was moved to host2 by an operator;
// without the condition the plugin's next session moved it back.
func TestNodeBoundSocketTakesNothingOver(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := c.Nodes[0].Backend() // the server's own backend: no caller to check
	if _, err := srv.ACLBootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	tok, err := srv.ACLTokenCreate(ctx, api.ACLTokenCreateRequest{Policies: []api.ACLPolicy{{Kind: api.ACLWrite}}, Node: "host1"})
	if err != nil {
		t.Fatal(err)
	}
	cn := c.AddClient(func(cfg *agent.Config) { cfg.NodeID, cfg.ACLToken = "host1", tok.SecretID })
	c.Eventually(20*time.Second, "the agent to know the server", func() bool { return len(cn.Servers()) == 1 })
	dir, err := os.MkdirTemp("", "psock") // short: 107 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{t: t, c: c, dir: dir, node: "host1", cfg: pluginsock.Config{
		Path: filepath.Join(dir, "p.sock"), Grace: 2 * time.Second, RegistrationTimeout: 2 * time.Second, Heartbeat: 200 * time.Millisecond, Events: cn.Client,
	}}
	cfg := e.cfg
	if e.svc, err = agent.StartServices(cn.Client, agent.ServicesConfig{PluginSocket: &cfg}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.svc.Stop() })

	first := e.open()
	conf, ready := first.register("p1", "1", "")
	if ready.GetPending() != "" || ready.GetIndex() == 0 {
		t.Fatalf("the plugin's own registration: %v", ready)
	}
	moved := &api.PluginInfo{Type: "demo", Name: "p1", AllocID: conf.GetAllocId(), NodeID: "host2", Version: "1",
		ConnectionInfo: &api.ConnectionInfo{Address: "host2.example:9000"}}
	if _, err := srv.Register(ctx, moved); err != nil {
		t.Fatal(err)
	}
	first.st.Send(stop) // its deregistration is conditional on host1: host2's instance stays
	first.end()

	second := e.open()
	_, ready = second.register("p1", "2", "")
	if !strings.Contains(ready.GetPending(), "condition not met") {
		t.Errorf("a registration over host2's instance: pending %q, want a conflict", ready.GetPending())
	}
	res, err := srv.Query(ctx, api.Query{Kind: api.QueryInstance, Type: "demo", Name: "p1", AllocID: conf.GetAllocId()})
	if err != nil || len(res.Plugins) != 1 {
		t.Fatalf("host2's instance: %+v %v", res, err)
	}
	if got := res.Plugins[0]; got.NodeID != "host2" || got.Version != "1" || got.ConnectionInfo.Address != moved.ConnectionInfo.Address {
		t.Fatalf("host2's instance was taken over: %+v", got)
	}
}
