package dynamicplugins

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testcluster.LeakOptions()...) }

// seedRegistry is the Registry interface as Nomad's client/dynamicplugins
// documents it (../shared/seeds), method for method.
type seedRegistry interface {
	RegisterPlugin(info *PluginInfo) error
	DeregisterPlugin(ptype, name, allocID string) error
	ListPlugins(ptype string) []*PluginInfo
	DispensePlugin(ptype, name string) (interface{}, error)
	PluginForAlloc(ptype, name, allocID string) (*PluginInfo, error)
	PluginsUpdatedCh(ctx context.Context, ptype string) <-chan *PluginUpdateEvent
	Shutdown()
	StubDispenserForType(ptype string, dispenser PluginDispenser)
}

// The registry satisfies the seed's interface, and the package's Registry
// is that interface exactly: no method more, none less.
func TestRegistryIsTheSeeds(t *testing.T) {
	var _ seedRegistry = NewRegistry(nil, Config{})
	seed, ours := reflect.TypeFor[seedRegistry](), reflect.TypeFor[Registry]()
	if seed.NumMethod() != ours.NumMethod() {
		t.Fatalf("Registry has %d methods, the seed's %d", ours.NumMethod(), seed.NumMethod())
	}
	for i := range seed.NumMethod() {
		m := seed.Method(i)
		o, ok := ours.MethodByName(m.Name)
		if !ok || o.Type != m.Type {
			t.Errorf("%s: ours %v, the seed's %v", m.Name, o.Type, m.Type)
		}
	}
}

func newRegistry(t *testing.T, c *testcluster.Cluster, dispensers map[string]PluginDispenser) *clusterRegistry {
	t.Helper()
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.HTTPURL)
	}
	cl, err := client.New(client.Config{Addrs: addrs, RetryWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(cl, Config{NodeID: "host-1", Dispensers: dispensers}).(*clusterRegistry)
	t.Cleanup(r.Shutdown)
	return r
}

func seedPlugin(name, alloc string) *PluginInfo {
	return &PluginInfo{Type: PluginTypeCSINode, Name: name, Version: "1", AllocID: alloc,
		ConnectionInfo: &PluginConnectionInfo{SocketPath: "/run/" + alloc + ".sock"}}
}

// nextUpdate receives one event, or fails after a deadline.
func nextUpdate(t *testing.T, ch <-chan *PluginUpdateEvent) string {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("PluginsUpdatedCh closed")
		}
		return fmt.Sprintf("%s %s/%s", ev.EventType, ev.Info.Name, ev.Info.AllocID)
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}
	return ""
}

func mustDispense(t *testing.T, r Registry, want string) {
	t.Helper()
	v, err := r.DispensePlugin(PluginTypeCSINode, "ebs")
	if err != nil || v != want {
		t.Fatalf("DispensePlugin = %v, %v; want %s", v, err, want)
	}
}

// The seed's semantics, run against three real servers: recency, the
// fallback to the older instance, dispensers and their stubs, events from
// the moment of the call and through a node's failure, and Shutdown.
func TestSeedSemanticsOnACluster(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	r := newRegistry(t, c, map[string]PluginDispenser{
		PluginTypeCSINode: func(p *PluginInfo) (interface{}, error) { return p.ConnectionInfo.SocketPath, nil },
	})
	var reg Registry = r
	if err := reg.RegisterPlugin(seedPlugin("ebs", "before")); err != nil {
		t.Fatal(err)
	}
	updates := reg.PluginsUpdatedCh(context.Background(), PluginTypeCSINode)

	for _, a := range []string{"a1", "a2"} {
		if err := reg.RegisterPlugin(seedPlugin("ebs", a)); err != nil {
			t.Fatal(err)
		}
	}
	// Registered before the call: not an update.
	for _, want := range []string{"registered ebs/a1", "registered ebs/a2"} {
		if got := nextUpdate(t, updates); got != want {
			t.Fatalf("update %q, want %q", got, want)
		}
	}
	list := reg.ListPlugins(PluginTypeCSINode)
	if len(list) != 1 || list[0].AllocID != "a2" || list[0].ConnectionInfo.SocketPath != "/run/a2.sock" {
		t.Fatalf("ListPlugins = %+v, want the newest of ebs, a2", list)
	}
	if reg.ListPlugins("no-such-type") != nil {
		t.Fatal("ListPlugins of an unknown type is not nil")
	}
	mustDispense(t, reg, "/run/a2.sock")
	reg.StubDispenserForType(PluginTypeCSINode, func(p *PluginInfo) (interface{}, error) { return "stub:" + p.AllocID, nil })
	mustDispense(t, reg, "stub:a2")
	reg.StubDispenserForType(PluginTypeCSINode, nil)
	mustDispense(t, reg, "/run/a2.sock")
	if _, err := reg.DispensePlugin("device", "gpu"); err == nil {
		t.Fatal("DispensePlugin without a dispenser for the type: no error")
	}
	if p, err := reg.PluginForAlloc(PluginTypeCSINode, "ebs", "a1"); err != nil || p.AllocID != "a1" {
		t.Fatalf("PluginForAlloc a1 = %+v, %v", p, err)
	}
	if _, err := reg.PluginForAlloc(PluginTypeCSINode, "ebs", "zz"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("PluginForAlloc of an unknown alloc: %v, want not found", err)
	}
	// The seed's own checks, with its words.
	if err := reg.RegisterPlugin(&PluginInfo{Type: PluginTypeCSINode, Name: "ebs", AllocID: "x"}); err == nil || err.Error() != "Plugin.ConnectionInfo must not be nil" {
		t.Fatalf("RegisterPlugin without ConnectionInfo: %v", err)
	}

	// The newest goes: the older one serves again.
	if err := reg.DeregisterPlugin(PluginTypeCSINode, "ebs", "a2"); err != nil {
		t.Fatal(err)
	}
	if got := nextUpdate(t, updates); got != "deregistered ebs/a2" {
		t.Fatalf("update %q, want deregistered ebs/a2", got)
	}
	mustDispense(t, reg, "/run/a1.sock")
	if err := reg.DeregisterPlugin(PluginTypeCSINode, "ebs", "a2"); err != nil {
		t.Fatalf("deregistering again: %v", err)
	}
	// Registering again what is registered is no event, as in the seed.
	if err := reg.RegisterPlugin(seedPlugin("ebs", "a1")); err != nil {
		t.Fatal(err)
	}
	// A changed registration is one (plugreg's "updated", which the seed
	// did not send: hashicorp/nomad#11786).
	changed := seedPlugin("ebs", "a1")
	changed.Version = "2"
	if err := reg.RegisterPlugin(changed); err != nil {
		t.Fatal(err)
	}
	if got := nextUpdate(t, updates); got != "registered ebs/a1" {
		t.Fatalf("update %q after a changed registration, want registered ebs/a1", got)
	}

	// A node fails: writes and the stream go on through the others.
	for i := range c.Nodes {
		c.Kill(i)
		if err := reg.RegisterPlugin(seedPlugin("ebs", fmt.Sprint("k", i))); err != nil {
			t.Fatalf("register with node %d down: %v", i, err)
		}
		if got, want := nextUpdate(t, updates), fmt.Sprintf("registered ebs/k%d", i); got != want {
			t.Fatalf("with node %d down: update %q, want %q", i, got, want)
		}
		c.Restart(i)
		c.WaitForLeader()
	}

	other := reg.PluginsUpdatedCh(context.Background(), PluginTypeCSIController)
	reg.Shutdown()
	for _, ch := range []<-chan *PluginUpdateEvent{updates, other} {
		for range ch { // closed by Shutdown
		}
	}
	if _, ok := <-reg.PluginsUpdatedCh(context.Background(), PluginTypeCSINode); ok {
		t.Fatal("PluginsUpdatedCh after Shutdown gave an event")
	}
}

// A consumer that falls behind a node's journal gets a reset from the
// cluster; the seed's consumer gets it as the changes it stands for, so
// folding what it received gives the cluster's state.
func TestResetDeliveredAsChanges(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{
		Heartbeat:          100 * time.Millisecond,
		StreamWriteTimeout: 200 * time.Millisecond,
		Modify:             func(_ int, cfg *cluster.Config) { cfg.JournalSize = 16 },
	})
	r := newRegistry(t, c, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.RegisterPlugin(seedPlugin("old", "gone")); err != nil {
		t.Fatal(err)
	}
	updates := r.PluginsUpdatedCh(ctx, PluginTypeCSINode)
	if err := r.RegisterPlugin(seedPlugin("ebs", "first")); err != nil {
		t.Fatal(err)
	}
	if got := nextUpdate(t, updates); got != "registered ebs/first" {
		t.Fatalf("update %q", got)
	}
	// Not reading: the writes below (30 KB each, twice in each event) run
	// far past every buffer, the loopback's included, so a server's write
	// stalls past its 200 ms deadline and the client resumes on a node
	// whose 16-event journal no longer holds its position.
	pad := strings.Repeat("x", 30<<10)
	var want []string
	for i := range 300 {
		p := seedPlugin(fmt.Sprint("n", i%20), fmt.Sprint("a", i))
		p.Options = map[string]string{"pad": pad}
		if err := r.RegisterPlugin(p); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := r.DeregisterPlugin(PluginTypeCSINode, p.Name, p.AllocID); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want = append(want, p.Name+"/"+p.AllocID)
	}
	// Among the changes the reset stands for: "old/gone", registered
	// before the call, is deregistered.
	for _, d := range [][2]string{{"ebs", "first"}, {"old", "gone"}} {
		if err := r.DeregisterPlugin(PluginTypeCSINode, d[0], d[1]); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	// What the consumer learns, folded over what it knew: "old/gone",
	// registered before its call, and ebs/first.
	have := map[string]bool{"old/gone": true, "ebs/first": true}
	deadline := time.After(60 * time.Second)
	for {
		var got []string
		for k, ok := range have {
			if ok {
				got = append(got, k)
			}
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			break
		}
		select {
		case ev := <-updates:
			have[ev.Info.Name+"/"+ev.Info.AllocID] = ev.EventType == EventTypeRegistered
		case <-deadline:
			t.Fatalf("after 60s the consumer holds %d instances, the cluster %d", len(got), len(want))
		}
	}
	if r.resets.Load() == 0 {
		t.Fatal("no reset reached the registry: the test did not cover what it is for")
	}
}
