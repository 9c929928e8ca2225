package gossip

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/plugreg/plugreg/api"
)

// newTestPool is a Pool without memberlist: its members are set as the
// event delegate sets them (addMember).
func newTestPool(self string) *Pool {
	return &Pool{cfg: Config{NodeID: self}, byName: map[string]*Member{}, serverNames: map[string]*Member{},
		changed: make(chan struct{}, 1), save: make(chan struct{}, 1), meta: Meta{ID: self, Role: api.RoleClient}, logger: hclog.NewNullLogger()}
}

// addMember reports name as memberlist would, with status st since since.
func addMember(p *Pool, name, role string, st Status, since time.Time) {
	meta := Meta{ID: name, Role: role, HTTPAddr: name + ":7700"}
	if role == api.RoleServer {
		meta.RaftAddr = name + ":7300"
	}
	b, _ := json.Marshal(meta)
	p.set(&memberlist.Node{Name: name, Addr: net.IPv4(10, 0, 0, 1), Port: 7946, Meta: b}, st)
	p.mu.Lock()
	p.byName[name].Since = since
	p.mu.Unlock()
}

func memberNames(p *Pool) []string {
	var out []string
	for _, m := range p.Members() {
		out = append(out, m.Name)
	}
	return out
}

// A client agent failed or gone for longer than ForgetAfter is forgotten,
// unless Keep keeps it (a server's: its plugins are not reaped yet);
// alive members, servers and this node never are, nor anyone with
// ForgetAfter negative.
func TestForgetMembersGoneTooLong(t *testing.T) {
	now := time.Unix(10_000, 0)
	long, short := now.Add(-2*time.Minute), now.Add(-30*time.Second)
	kept := map[string]bool{"client-failed-kept": true}
	for _, tc := range []struct {
		name        string
		forgetAfter time.Duration
		keep        func(Member) bool
		want        []string
	}{
		{"default", 0, nil, []string{"client-alive", "client-failed-recent", "self", "server-failed", "server-left"}},
		{"with keep", time.Minute, func(m Member) bool { return kept[m.Name] },
			[]string{"client-alive", "client-failed-kept", "client-failed-recent", "self", "server-failed", "server-failed-kept", "server-left"}},
		{"never", -1, nil, []string{"client-alive", "client-failed", "client-failed-kept", "client-failed-recent", "client-left", "self", "server-failed", "server-left"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool("self")
			p.cfg.ForgetAfter, p.cfg.Keep = tc.forgetAfter, tc.keep
			addMember(p, "self", api.RoleClient, StatusFailed, long) // itself, as a peer's gossip may say
			addMember(p, "client-alive", api.RoleClient, StatusAlive, long)
			addMember(p, "client-failed", api.RoleClient, StatusFailed, long)
			addMember(p, "client-failed-kept", api.RoleClient, StatusFailed, long)
			addMember(p, "client-failed-recent", api.RoleClient, StatusFailed, short)
			addMember(p, "client-left", api.RoleClient, StatusLeft, long)
			addMember(p, "server-failed", api.RoleServer, StatusFailed, long)
			addMember(p, "server-left", api.RoleServer, StatusLeft, long)
			if tc.keep != nil {
				kept["server-failed-kept"] = true
				addMember(p, "server-failed-kept", api.RoleServer, StatusFailed, long)
			}
			p.forget(now)
			if got := memberNames(p); !slices.Equal(got, tc.want) {
				t.Fatalf("members after forget:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

// A member that came back while forget judged it is not forgotten: set
// replaced it, and forget drops only the member it judged.
func TestForgetSparesAMemberBackMeanwhile(t *testing.T) {
	now := time.Unix(10_000, 0)
	p := newTestPool("self")
	p.cfg.ForgetAfter = time.Minute
	addMember(p, "c", api.RoleClient, StatusFailed, now.Add(-time.Hour))
	p.cfg.Keep = func(m Member) bool {
		addMember(p, "c", api.RoleClient, StatusAlive, now) // back while Keep is asked
		return false
	}
	p.forget(now)
	if got := memberNames(p); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("members: %v, want c (alive again)", got)
	}
}

// AliveServers follows every change of a server member: a join, a failure,
// a return, a leave by RPC (MarkLeft), a new address; client agents never
// show.
func TestAliveServersFollowServerChanges(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	p := newTestPool("self")
	ids := func() []string {
		var out []string
		for _, m := range p.AliveServers() {
			out = append(out, m.ID)
		}
		return out
	}
	for _, step := range []struct {
		name string
		do   func()
		want []string
	}{
		{"two servers and a client join", func() {
			addMember(p, "s2", api.RoleServer, StatusAlive, t0)
			addMember(p, "s1", api.RoleServer, StatusAlive, t0)
			addMember(p, "c1", api.RoleClient, StatusAlive, t0)
		}, []string{"s1", "s2"}},
		{"s1 fails", func() { addMember(p, "s1", api.RoleServer, StatusFailed, t0) }, []string{"s2"}},
		{"s1 is back", func() { addMember(p, "s1", api.RoleServer, StatusAlive, t0) }, []string{"s1", "s2"}},
		{"s2 leaves by RPC", func() { p.MarkLeft("s2") }, []string{"s1"}},
		{"a client fails", func() { addMember(p, "c1", api.RoleClient, StatusFailed, t0) }, []string{"s1"}},
		{"s3 joins", func() { addMember(p, "s3", api.RoleServer, StatusAlive, t0) }, []string{"s1", "s3"}},
	} {
		step.do()
		if got := ids(); !slices.Equal(got, step.want) {
			t.Fatalf("%s: alive servers %v, want %v", step.name, got, step.want)
		}
	}
	// A caller's change to the list it got is its own.
	got := p.AliveServers()
	got[0].ID = "changed"
	if ids()[0] != "s1" {
		t.Fatal("a caller's change to AliveServers' answer changed the pool's list")
	}
}

// AliveServers costs the same with a fleet's members in the pool as with a
// handful: it allocated a copy of every member on every call (and it is
// called on every RPC of a client agent).
func TestAliveServersAllocationIsBoundedByTheServers(t *testing.T) {
	p := newTestPool("self")
	t0 := time.Unix(10_000, 0)
	for i := range 3 {
		addMember(p, fmt.Sprintf("s%d", i), api.RoleServer, StatusAlive, t0)
	}
	for i := range 10_000 {
		addMember(p, fmt.Sprintf("c%05d", i), api.RoleClient, StatusAlive, t0)
	}
	const calls = 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		if len(p.AliveServers()) != 3 {
			t.Fatal("want 3 alive servers")
		}
	}
	runtime.ReadMemStats(&after)
	// Three metas are a few hundred bytes; 10,000 members copied are MBs.
	if perCall := (after.TotalAlloc - before.TotalAlloc) / calls; perCall > 16<<10 {
		t.Fatalf("AliveServers allocated %d bytes a call among 10,000 members; want it bounded by the 3 servers", perCall)
	}
}

// The peers file holds every server that did not leave, first, then at
// most maxSavedClients alive client agents, so that neither the file nor
// a rejoin through it grows with the fleet.
func TestPeersFileIsBounded(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	for _, tc := range []struct{ servers, clients, failedClients int }{
		{3, 0, 0},
		{3, 5, 2},
		{5, 1000, 1000},
	} {
		t.Run(fmt.Sprintf("%d servers %d clients", tc.servers, tc.clients), func(t *testing.T) {
			p := newTestPool("self")
			p.cfg.PeersFile = filepath.Join(t.TempDir(), "gossip-peers.json")
			alive := map[string]bool{}
			for i := range tc.servers {
				addMember(p, fmt.Sprintf("s%d", i), api.RoleServer, StatusAlive, t0)
			}
			addMember(p, "s-left", api.RoleServer, StatusLeft, t0)
			for i := range tc.clients {
				addMember(p, fmt.Sprintf("c%d", i), api.RoleClient, StatusAlive, t0)
				alive[fmt.Sprintf("c%d", i)] = true
			}
			for i := range tc.failedClients {
				addMember(p, fmt.Sprintf("f%d", i), api.RoleClient, StatusFailed, t0)
			}
			// Distinct addresses, so that the file says who is who.
			p.mu.Lock()
			for _, m := range p.byName {
				m.GossipAddr = m.Name
			}
			p.mu.Unlock()
			p.savePeers()
			b, err := os.ReadFile(p.cfg.PeersFile)
			if err != nil {
				t.Fatal(err)
			}
			var saved []string
			if err := json.Unmarshal(b, &saved); err != nil {
				t.Fatal(err)
			}
			wantClients := min(tc.clients, maxSavedClients)
			if len(saved) != tc.servers+wantClients {
				t.Fatalf("saved %d addresses, want %d servers and %d clients", len(saved), tc.servers, wantClients)
			}
			for i := range tc.servers {
				if saved[i] != fmt.Sprintf("s%d", i) {
					t.Fatalf("saved[%d] = %s, want the servers first, by name: %v", i, saved[i], saved)
				}
			}
			for _, a := range saved[tc.servers:] {
				if !alive[a] {
					t.Fatalf("saved %s, not an alive client agent: %v", a, saved)
				}
			}
			if len(slices.Compact(slices.Sorted(slices.Values(saved)))) != len(saved) {
				t.Fatalf("saved an address twice: %v", saved)
			}
		})
	}
}

// A rejoin from the peers file joins one saved peer at a time, in the
// file's order, and stops at the first that answers: here a dead address,
// then a (server's) pool that answers, then two more pools that must not
// be joined (each join is a full state exchange; with a fleet's file, one
// per remembered host). An older release's file, longer than
// maxRejoinPeers, is cut.
func TestRejoinStopsAtTheFirstSavedPeerThatAnswers(t *testing.T) {
	var pools [3]*Pool
	for i := range pools {
		p, err := Start(Config{NodeID: fmt.Sprintf("peer%d", i), BindAddr: "127.0.0.1", Fast: true,
			Meta: Meta{ID: fmt.Sprintf("peer%d", i), Role: api.RoleServer}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown()
		pools[i] = p
	}
	path := filepath.Join(t.TempDir(), "gossip-peers.json")
	saved := []string{deadAddr(t), pools[0].Addr(), pools[1].Addr(), pools[2].Addr()}
	for i := range maxRejoinPeers {
		saved = append(saved, net.JoinHostPort("127.0.0.1", strconv.Itoa(1+i))) // never reached
	}
	b, _ := json.Marshal(saved)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// memberlist asks the merge delegate once per join's state exchange,
	// before Join returns.
	var exchanges atomic.Int32
	p, err := Start(Config{NodeID: "rejoiner", BindAddr: "127.0.0.1", Fast: true, PeersFile: path,
		Meta: Meta{ID: "rejoiner", Role: api.RoleClient}, tune: func(c *memberlist.Config) { c.Merge = countJoins{&exchanges} }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	if got := len(p.SavedPeers()); got != maxRejoinPeers {
		t.Fatalf("SavedPeers: %d addresses of %d, want the first %d", got, len(saved), maxRejoinPeers)
	}
	if err := p.JoinAtStart(nil, false, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := exchanges.Load(); n != 1 {
		t.Fatalf("the rejoin made %d state exchanges, want 1 (with the first saved peer that answers)", n)
	}
	var joined []string
	for _, m := range p.Members() {
		joined = append(joined, m.Name)
	}
	if !slices.Equal(joined, []string{"peer0", "rejoiner"}) {
		t.Fatalf("members after the rejoin: %v, want peer0 (the first that answers) and itself", joined)
	}
}

// countJoins counts a pool's joins' state exchanges (memberlist's merge
// delegate is asked on each).
type countJoins struct{ n *atomic.Int32 }

func (c countJoins) NotifyMerge([]*memberlist.Node) error {
	c.n.Add(1)
	return nil
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// BenchmarkAliveServers: the alive servers among 3 servers and a fleet of
// client agents, as a client agent asks for them on every RPC.
func BenchmarkAliveServers(b *testing.B) {
	for _, members := range []int{100, 1000, 10_000} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			p := newTestPool("self")
			t0 := time.Unix(10_000, 0)
			for i := range 3 {
				addMember(p, fmt.Sprintf("s%d", i), api.RoleServer, StatusAlive, t0)
			}
			for i := range members - 3 {
				addMember(p, fmt.Sprintf("c%05d", i), api.RoleClient, StatusAlive, t0)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if len(p.AliveServers()) != 3 {
					b.Fatal("want 3 alive servers")
				}
			}
		})
	}
}
