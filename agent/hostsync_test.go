package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// entries counts the commands in an apply log by name, and the
// registrations host syncs carried.
type entries struct {
	byCommand  map[string]int
	syncedRegs int
}

func readApplyLog(t *testing.T, path string) entries {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := entries{byCommand: map[string]int{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var rec struct {
			Command string
			Request struct{ Register []json.RawMessage }
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("apply log: %v", err)
		}
		out.byCommand[rec.Command]++
		if rec.Command == "host-sync" {
			out.syncedRegs += len(rec.Request.Register)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// clusterWithApplyLog starts three servers, the first of which journals
// every entry it applies to the returned file.
func clusterWithApplyLog(t *testing.T, opts testcluster.Options) (*testcluster.Cluster, string) {
	path := filepath.Join(t.TempDir(), "apply.log")
	opts.Modify = func(i int, c *cluster.Config) {
		if i == 0 {
			c.ApplyLog = path
		}
	}
	return testcluster.New(t, 3, opts), path
}

// wantHost registers n plugins through h, each carrying pad bytes.
func wantHost(t *testing.T, ctx context.Context, h *agent.Host, n, pad int) {
	t.Helper()
	for i := range n {
		p := hostPlugin(fmt.Sprintf("p%04d", i), h.NodeID())
		if pad > 0 {
			p.Options["pad"] = strings.Repeat("x", pad)
		}
		// Retried: on this shared machine a leader may step down.
		for try := 0; ; try++ {
			err := h.Register(ctx, p)
			if err == nil {
				break
			}
			if try == 5 || api.RefusalCode(err) != "" {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// An anti-entropy round's writes are one log entry (a host's 20 plugins
// after a restart: one entry, not 20), or as few as an entry's bounds
// allow (1,000 writes, 640 KiB), through a client agent and from a
// server's own host alike; and what they register is what the host has.
func TestHostSyncIsOneEntry(t *testing.T) {
	c, applyLog := clusterWithApplyLog(t, testcluster.Options{})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cases := []struct {
		name        string
		writer      agent.Writer
		plugins     int
		pad         int
		wantEntries int
	}{
		{"a host's 20 plugins", cn.Client, 20, 0, 1},
		{"a server's own host's 20 plugins", c.Nodes[1].Backend(), 20, 0, 1},
		{"1,100 plugins: more writes than one entry carries", c.Nodes[0].Backend(), 1100, 0, 2},
		{"12 plugins of 60 KiB: more bytes than one entry carries", cn.Client, 12, 60 << 10, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := agent.NewHost(agent.HostConfig{Backend: tc.writer, Sources: []string{api.SourceKubelet}})
			if err != nil {
				t.Fatal(err)
			}
			h.Ready(api.SourceKubelet)
			wantHost(t, ctx, h, tc.plugins, tc.pad)
			// The node's instances are gone (reaped), as after a long
			// outage: the round registers them all again.
			if _, err := c.Nodes[0].Backend().DeregisterNode(ctx, h.NodeID()); err != nil {
				t.Fatal(err)
			}
			c.Eventually(10*time.Second, "the server with the apply log to apply the reap", func() bool {
				return c.Nodes[0].Server.AppliedIndex() >= c.Leader().Server.AppliedIndex()
			})
			before := readApplyLog(t, applyLog)
			// On this shared machine a leader may step down mid-round:
			// the next round (as Run would make) writes what is missing.
			retries := 0
			for err := h.Sync(ctx); err != nil; err = h.Sync(ctx) {
				if retries++; retries > 5 || api.RefusalCode(err) != "" {
					t.Fatalf("sync: %v", err)
				}
				t.Logf("round %d failed, retrying: %v", retries, err)
				time.Sleep(time.Second)
			}
			var after entries
			c.Eventually(10*time.Second, "the entries to be applied where they are journaled", func() bool {
				after = readApplyLog(t, applyLog)
				return after.syncedRegs-before.syncedRegs >= tc.plugins
			})
			if got := after.byCommand["host-sync"] - before.byCommand["host-sync"]; got != tc.wantEntries && retries == 0 {
				t.Errorf("%d host-sync entries, want %d", got, tc.wantEntries)
			}
			if got := after.syncedRegs - before.syncedRegs; got != tc.plugins && retries == 0 {
				t.Errorf("host syncs carried %d registrations, want %d", got, tc.plugins)
			}
			for _, single := range []string{"register", "conditional-register"} {
				if n := after.byCommand[single] - before.byCommand[single]; n != 0 {
					t.Errorf("%d %s entries besides", n, single)
				}
			}
			if st := h.Stats(); (st.Writes != tc.wantEntries || st.Registered != tc.plugins) && retries == 0 {
				t.Errorf("stats %+v: want %d writes, %d registered", st, tc.wantEntries, tc.plugins)
			}
			res, err := c.Leader().Backend().Query(ctx, api.Query{Kind: api.QueryNode, NodeID: h.NodeID()})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range res.Plugins {
				got = append(got, p.Name)
			}
			var want []string
			for _, p := range h.Plugins() {
				want = append(want, p.Name)
			}
			if slices.Sort(got); !slices.Equal(got, want) {
				t.Errorf("registered %d plugins, the host has %d", len(got), len(want))
			}
			// A second round finds nothing to write.
			writes := h.Stats().Writes
			if err := h.Sync(ctx); err != nil || h.Stats().Writes != writes {
				t.Errorf("a round with nothing to do wrote: %v, %+v", err, h.Stats())
			}
		})
	}
}

// olderServers is a client agent as it is while a server it sees alive
// is of the release before SyncHost: its SyncHost answers what
// agent.Client's does then (nothing sent, api.ErrUnsupported); its other
// writes are the agent's own.
type olderServers struct{ *agent.Client }

func (olderServers) SyncHost(context.Context, api.HostSyncRequest) (api.HostSyncResult, error) {
	return api.HostSyncResult{}, fmt.Errorf("host sync: %w: server s1 does not serve it yet", api.ErrUnsupported)
}

// While a server does not serve SyncHost, a host writes one instance at a
// time, as before it, with the same outcome.
func TestHostSyncFallsBackOneByOne(t *testing.T) {
	c, applyLog := clusterWithApplyLog(t, testcluster.Options{})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := agent.NewHost(agent.HostConfig{Backend: olderServers{cn.Client}, Sources: []string{api.SourceKubelet}})
	if err != nil {
		t.Fatal(err)
	}
	h.Ready(api.SourceKubelet)
	stale := hostPlugin("stale", "client1")
	stale.NodeID = "client1"
	wantHost(t, ctx, h, 20, 0)
	if _, err := cn.Client.DeregisterNode(ctx, "client1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cn.Client.Register(ctx, stale); err != nil {
		t.Fatal(err)
	}
	c.Eventually(10*time.Second, "the server with the apply log to apply the reap", func() bool {
		return c.Nodes[0].Server.AppliedIndex() >= c.Leader().Server.AppliedIndex()
	})
	before := readApplyLog(t, applyLog)
	if err := h.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.Stats(); st.Writes != 21 || st.Registered != 20 || st.Deregistered != 1 {
		t.Errorf("stats %+v: want 21 writes, 20 registered, 1 deregistered", st)
	}
	c.Eventually(10*time.Second, "the writes to be applied where they are journaled", func() bool {
		after := readApplyLog(t, applyLog)
		return after.byCommand["register"]-before.byCommand["register"] == 20 &&
			after.byCommand["conditional-deregister"]-before.byCommand["conditional-deregister"] == 1
	})
	if n := readApplyLog(t, applyLog).byCommand["host-sync"]; n != 0 {
		t.Errorf("%d host-sync entries", n)
	}
	res, err := c.Leader().Backend().Query(ctx, api.Query{Kind: api.QueryNode, NodeID: "client1"})
	if err != nil || len(res.Plugins) != 20 {
		t.Fatalf("the node's instances after the round: %d, %v", len(res.Plugins), err)
	}
}

// A node-bound agent token syncs its own node's instances only, decided
// by the server from the token: another node's sync is refused whole; a
// registration of an instance another node owns, and the removal of one,
// are left alone and reported, while the rest of the sync applies.
func TestHostSyncNodeBoundToken(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := c.Nodes[0].HTTPURL
	var boot, host1, csiOnly api.ACLTokenSecret
	if st := httpJSON(t, "PUT", srv+"/v1/acl/bootstrap", "", "", &boot); st != 200 {
		t.Fatalf("bootstrap: %d", st)
	}
	if st := httpJSON(t, "PUT", srv+"/v1/acl/token", boot.SecretID, `{"Description":"agent host1","Policies":[{"Kind":"write"}],"Node":"host1"}`, &host1); st != 200 {
		t.Fatalf("create the agent token of host1: %d", st)
	}
	if st := httpJSON(t, "PUT", srv+"/v1/acl/token", boot.SecretID, `{"Description":"agent host3, csi","Policies":[{"Kind":"write","Types":["csi"]}],"Node":"host3"}`, &csiOnly); st != 200 {
		t.Fatalf("create the agent token of host3: %d", st)
	}
	root, err := client.New(client.Config{Addrs: []string{srv}, Token: boot.SecretID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Register(ctx, plugin("host2", "ebs", "b1")); err != nil {
		t.Fatal(err)
	}
	cn := c.AddClient(func(cfg *agent.Config) { cfg.NodeID, cfg.ACLToken = "host1", host1.SecretID })
	cn3 := c.AddClient(func(cfg *agent.Config) { cfg.NodeID, cfg.ACLToken = "host3", csiOnly.SecretID })
	c.Eventually(20*time.Second, "the agents to know the servers", func() bool { return len(cn.Servers()) == 3 && len(cn3.Servers()) == 3 })
	gpu := plugin("host3", "gpu", "g1")
	gpu.Type = "device"
	cases := []struct {
		name        string
		cl          *agent.Client
		req         api.HostSyncRequest
		wantErr     error
		wantRefused []int
	}{
		{"its own node", cn.Client, api.HostSyncRequest{NodeID: "host1", Register: []*api.PluginInfo{plugin("host1", "ebs", "a1"), plugin("host1", "efs", "a1")}}, nil, nil},
		{"another node's sync", cn.Client, api.HostSyncRequest{NodeID: "host2", Register: []*api.PluginInfo{plugin("host2", "ebs", "b2")}}, api.ErrPermissionDenied, nil},
		{"another node's instance, taken over and removed", cn.Client, api.HostSyncRequest{NodeID: "host1",
			Register:   []*api.PluginInfo{plugin("host1", "ebs", "a2"), plugin("host1", "ebs", "b1")},
			Deregister: []api.HostDeregistration{{Type: "csi", Name: "ebs", AllocID: "b1"}, {Type: "csi", Name: "efs", AllocID: "a1"}}}, api.ErrInvalid, nil},
		{"another node's instance", cn.Client, api.HostSyncRequest{NodeID: "host1",
			Register:   []*api.PluginInfo{plugin("host1", "ebs", "a2"), plugin("host1", "ebs", "b1")},
			Deregister: []api.HostDeregistration{{Type: "csi", Name: "efs", AllocID: "a1"}}}, nil, []int{1}},
		{"another node's instance, removed", cn.Client, api.HostSyncRequest{NodeID: "host1",
			Deregister: []api.HostDeregistration{{Type: "csi", Name: "ebs", AllocID: "b1"}, {Type: "csi", Name: "ebs", AllocID: "a2"}}}, nil, []int{0}},
		{"a type its token may not write", cn3.Client, api.HostSyncRequest{NodeID: "host3", Register: []*api.PluginInfo{plugin("host3", "ebs", "c1"), gpu}}, api.ErrPermissionDenied, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tc.cl.SyncHost(ctx, tc.req)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("sync: %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(res.Refused, tc.wantRefused) {
				t.Errorf("refused %v, want %v", res.Refused, tc.wantRefused)
			}
		})
	}
	be := c.Leader().Backend()
	res, err := be.Query(ctx, api.Query{Kind: api.QueryInstances, Type: "csi", Name: "ebs"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range res.Plugins {
		got = append(got, p.AllocID+"@"+p.NodeID)
	}
	// host2's b1 stands; host1's a2 came and went.
	if want := []string{"a1@host1", "b1@host2"}; !slices.Equal(got, want) {
		t.Errorf("csi/ebs after the syncs: %v, want %v", got, want)
	}
	for _, q := range []api.Query{
		{Kind: api.QueryInstances, Type: "csi", Name: "efs"},    // removed by its node's sync
		{Kind: api.QueryInstances, Type: "device", Name: "gpu"}, // a type the token may not write
	} {
		if _, err := be.Query(ctx, q); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("%s/%s: %v, want not found", q.Type, q.Name, err)
		}
	}
}
