package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

func plugin(node, name, alloc string) *api.PluginInfo {
	return &api.PluginInfo{Type: "csi", Name: name, AllocID: alloc, NodeID: node, Version: "1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"}}
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Addrs: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A client agent serves the whole HTTP API through the servers: writes
// land in Raft, reads see them with the consistency asked for, events
// stream, conditions hold, and it is a member with role client that never
// votes.
func TestClientAgentServesTheAPI(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	cn := c.AddClient(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ac := newClient(t, cn.HTTPURL)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })

	events := ac.Stream(ctx, 0, client.WatchOptions{Types: []string{"csi"}}).Events()
	res, err := ac.Register(ctx, plugin("client1", "ebs", "a1"))
	if err != nil || res.Result != api.ResultRegistered {
		t.Fatalf("register through the agent: %+v %v", res, err)
	}
	// Acknowledged through the agent: every server has it at that index.
	for _, n := range c.Nodes {
		sc := newClient(t, n.HTTPURL)
		list, meta, err := sc.List(ctx, "csi", nil)
		if err != nil || len(list) != 1 || meta.Index < res.Index {
			t.Fatalf("%s: list %v meta %+v err %v", n.Config.NodeID, list, meta, err)
		}
	}
	for _, q := range []*client.QueryOptions{nil, {Stale: true}} {
		list, meta, err := ac.List(ctx, "csi", q)
		if err != nil || len(list) != 1 || list[0].AllocID != "a1" || !meta.KnownLeader {
			t.Fatalf("list through the agent (%+v): %v %+v %v", q, list, meta, err)
		}
	}
	if _, _, err := ac.Get(ctx, "csi", "ebs", "nope", nil); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("get absent through the agent: %v", err)
	}
	// A not-found answer carries the index of the state read, as a
	// server's does (the fault suite caught it at 0).
	resp, err := http.Get(cn.HTTPURL + "/v1/plugins/csi/ebs/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if idx, _ := strconv.ParseUint(resp.Header.Get("X-Plugreg-Index"), 10, 64); resp.StatusCode != http.StatusNotFound || idx < res.Index {
		t.Fatalf("not found through the agent: %d with X-Plugreg-Index %q, want 404 at or past %d", resp.StatusCode, resp.Header.Get("X-Plugreg-Index"), res.Index)
	}
	if _, err := ac.Register(ctx, &api.PluginInfo{Type: "csi", Name: ""}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("invalid register through the agent: %v", err)
	}
	// Blocking query through the agent: woken by a write.
	woke := make(chan error, 1)
	go func() {
		_, meta, err := ac.List(ctx, "csi", &client.QueryOptions{WaitIndex: res.Index, WaitTime: 30 * time.Second})
		if err == nil && meta.Index <= res.Index {
			err = errors.New("woke without a change")
		}
		woke <- err
	}()
	time.Sleep(100 * time.Millisecond)
	res2, err := ac.Register(ctx, plugin("client1", "ebs", "a2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-woke; err != nil {
		t.Fatalf("blocking query through the agent: %v", err)
	}
	// A conditional deregister names the owner.
	if _, err := ac.DeregisterIf(ctx, api.DeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfNodeID: "someone-else"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("conditional deregister of another node's instance: %v", err)
	}
	if r, err := ac.DeregisterIf(ctx, api.DeregisterRequest{Type: "csi", Name: "ebs", AllocID: "a1", IfNodeID: "client1"}); err != nil || r.Result != api.ResultDeregistered {
		t.Fatalf("conditional deregister by the owner: %+v %v", r, err)
	}
	// The event stream through the agent: in order, at their indexes.
	want := []struct {
		typ   api.EventType
		alloc string
		index uint64
	}{{api.EventRegistered, "a1", res.Index}, {api.EventRegistered, "a2", res2.Index}, {api.EventDeregistered, "a1", 0}}
	for i, w := range want {
		select {
		case ev := <-events:
			if ev.EventType != w.typ || ev.Info.AllocID != w.alloc || (w.index != 0 && ev.Index != w.index) {
				t.Fatalf("event %d: %+v, want %+v", i, ev, w)
			}
		case <-ctx.Done():
			t.Fatalf("event %d never came", i)
		}
	}
	// Membership: the agent is a client, and never a voter.
	members, err := ac.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, m := range members {
		roles[m.Name] = m.Role
		if m.Role == api.RoleClient && m.Voter {
			t.Fatalf("a client agent is a voter: %+v", m)
		}
	}
	if roles["client1"] != api.RoleClient || roles["node1"] != api.RoleServer || len(roles) != 4 {
		t.Fatalf("members seen through the agent: %+v", members)
	}
	peers, err := ac.Peers(ctx)
	if err != nil || len(peers) != 3 {
		t.Fatalf("peers: %v %v", peers, err)
	}
	// Operator calls are for servers.
	req, _ := http.NewRequest(http.MethodPost, cn.HTTPURL+"/v1/operator/leadership-transfer", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("leadership transfer through a client agent: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// A client agent whose host dies loses its plugins after -node-reap-after;
// one that comes back is a member again.
func TestClientAgentIsReapedWhenItDies(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) { cfg.NodeReapAfter = time.Second }})
	cn := c.AddClient(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ac := newClient(t, cn.HTTPURL)
	for _, a := range []string{"a1", "a2"} {
		if _, err := ac.Register(ctx, plugin("client1", "ebs", a)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ac.Register(ctx, plugin("elsewhere", "ebs", "b1")); err != nil {
		t.Fatal(err)
	}
	cn.Kill()
	sc := newClient(t, c.Leader().HTTPURL)
	c.Eventually(30*time.Second, "the dead agent's plugins to be reaped", func() bool {
		list, _, err := sc.Instances(ctx, "csi", "ebs", nil)
		return err == nil && len(list) == 1 && list[0].AllocID == "b1"
	})
	cn.Restart()
	c.Eventually(30*time.Second, "the agent to be alive again", func() bool {
		for _, m := range c.Leader().Members() {
			if m.Name == "client1" {
				return m.Status == gossip.StatusAlive
			}
		}
		return false
	})
	if n := len(c.Leader().Backend().Members(context.Background())); n != 4 {
		t.Fatalf("members after the agent's return: %d", n)
	}
}

// A write through a client agent survives the loss of the server it was
// using: the agent tries the next one.
func TestClientAgentFailsOverBetweenServers(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	cn := c.AddClient(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ac := newClient(t, cn.HTTPURL)
	if _, err := ac.Register(ctx, plugin("client1", "ebs", "a1")); err != nil {
		t.Fatal(err)
	}
	used := cn.Servers()[0]
	for i, n := range c.Nodes {
		if n.RaftAddr() == used {
			c.Kill(i)
		}
	}
	c.WaitForLeader()
	if _, err := ac.Register(ctx, plugin("client1", "ebs", "a2")); err != nil {
		t.Fatalf("register after the agent's server died: %v", err)
	}
	list, _, err := ac.Instances(ctx, "csi", "ebs", nil)
	if err != nil || len(list) != 2 {
		t.Fatalf("instances: %v %v", list, err)
	}
}

// -bootstrap-expect counts servers only: two servers expecting three do
// not bootstrap with a client agent as the third, and a client agent that
// joined before the third server does not keep them from bootstrapping
// when it comes (it cannot answer the servers' "do you have a cluster?").
func TestClientAgentDoesNotCountForBootstrap(t *testing.T) {
	c := testcluster.New(t, 2, testcluster.Options{NoLeaderWait: true, Modify: func(_ int, cfg *cluster.Config) { cfg.BootstrapExpect = 3 }})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "both servers to see the client agent", func() bool {
		for _, n := range c.Nodes {
			if len(n.Members()) != 3 {
				return false
			}
		}
		return true
	})
	// Bootstrap checks every 200ms; give it many chances to be wrong.
	time.Sleep(2 * time.Second)
	for _, n := range c.Nodes {
		if peers, err := n.Peers(); err != nil || len(peers) != 0 {
			t.Fatalf("%s bootstrapped with a client agent counted as a server: peers %v %v", n.Config.NodeID, peers, err)
		}
	}
	if st := cn.Health(); st.Status == "ok" {
		t.Fatalf("client agent healthy without a cluster: %+v", st)
	}
	c.AddServer()
	leader := c.WaitForLeader()
	if peers, err := leader.Peers(); err != nil || len(peers) != 3 {
		t.Fatalf("peers after the third server came: %v %v", peers, err)
	}
	c.Eventually(20*time.Second, "the client agent to be healthy", func() bool { return cn.Health().Status == "ok" })
}

// Local watchers of a client agent share one upstream stream per filter,
// and their streams go on without a gap or a duplicate when the server
// feeding them dies: the agent resumes upstream at another server.
func TestClientAgentEventsFanOutAndSurviveTheirServer(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ac := newClient(t, cn.HTTPURL)
	const watchers, writes = 20, 60
	// Writes go to every server in turn (with retries under one request
	// ID), so that killing any one of them loses none.
	sc, err := client.New(client.Config{Addrs: []string{c.Nodes[0].HTTPURL, c.Nodes[1].HTTPURL, c.Nodes[2].HTTPURL}})
	if err != nil {
		t.Fatal(err)
	}
	_, meta, err := sc.List(ctx, "csi", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Half resume from index 0 (older than the agent's buffer: each gets
	// a passthrough, which joins the shared stream once caught up), half
	// from the current index (served from the shared stream at once).
	streams := make([]<-chan *api.Event, watchers)
	for i := range streams {
		from := meta.Index
		if i%2 == 0 {
			from = 0
		}
		streams[i] = ac.Stream(ctx, from, client.WatchOptions{Types: []string{"csi"}}).Events()
	}
	write := func(i int) {
		t.Helper()
		if _, err := sc.Register(ctx, plugin("elsewhere", "ebs", fmt.Sprintf("a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]uint64, watchers)
	take := func(n int) {
		t.Helper()
		for w, ch := range streams {
			for len(got[w]) < n {
				select {
				case ev, ok := <-ch:
					if !ok {
						t.Fatalf("watcher %d: stream closed", w)
					}
					if ev.EventType != api.EventRegistered {
						t.Fatalf("watcher %d: unexpected %s", w, ev.EventType)
					}
					got[w] = append(got[w], ev.Index)
				case <-ctx.Done():
					t.Fatalf("watcher %d: %d of %d events", w, len(got[w]), n)
				}
			}
		}
	}
	write(0)
	take(1)
	c.Eventually(30*time.Second, "every watcher on the one shared upstream", func() bool {
		st := cn.EventStats()
		return st.Upstreams == 1 && st.ActivePassthroughs == 0 && st.Subscribers == watchers
	})
	for i := 1; i < writes/2; i++ {
		write(i)
	}
	// Kill the server the agent streams from (the agent prefers the
	// server it last opened a stream to or called).
	used := cn.Servers()[0]
	killed := false
	for i, n := range c.Nodes {
		if n.RaftAddr() == used {
			c.Kill(i)
			killed = true
		}
	}
	if !killed {
		t.Fatalf("no server at %s", used)
	}
	for i := writes / 2; i < writes; i++ {
		write(i)
	}
	take(writes)
	for w := range got {
		for i := 1; i < len(got[w]); i++ {
			if got[w][i] <= got[w][i-1] {
				t.Fatalf("watcher %d: index %d after %d (duplicate or out of order)", w, got[w][i], got[w][i-1])
			}
		}
		if len(got[w]) != writes {
			t.Fatalf("watcher %d: %d events, want %d", w, len(got[w]), writes)
		}
	}
}
