package gossip

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// memberlist calls the event delegate synchronously under its own locks:
// the delegate must not wait on the disk. Here the peers file's temporary
// path is a FIFO nobody reads, so a write there blocks until a reader
// comes; a membership change must still return at once.
func TestMembershipChangeDoesNotWaitForTheDisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gossip-peers.json")
	if err := syscall.Mkfifo(path+".tmp", 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	m := &Pool{cfg: Config{NodeID: "self", PeersFile: path}, byName: map[string]*Member{}, meta: Meta{ID: "self", Role: "server"},
		changed: make(chan struct{}, 1), save: make(chan struct{}, 1)}
	peer := &memberlist.Node{Name: "peer", Meta: []byte(`{"ID":"peer","Role":"server"}`)}
	returned := make(chan struct{})
	go func() {
		(*delegate)(m).NotifyJoin(peer)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		// Unblock the writer so the test can end, then fail.
		f, err := os.OpenFile(path+".tmp", os.O_RDONLY, 0)
		if err == nil {
			f.Close()
		}
		<-returned
		t.Fatal("NotifyJoin waited on the peers file")
	}
	select {
	case <-m.save:
	default:
		t.Fatal("NotifyJoin did not ask for the peers file to be written")
	}
}

// A member memberlist declared dead is tried again: here memberlist never
// gossips to the dead (GossipToTheDeadTime 0) and b comes back on its
// address without joining anyone, so only a's reconnect can bring the two
// together again (as after a partition longer than memberlist's 30 s).
func TestReconnectToAMemberDeclaredDead(t *testing.T) {
	tune := func(c *memberlist.Config) { c.GossipToTheDeadTime = 0 }
	start := func(name string, port int) *Pool {
		t.Helper()
		p, err := Start(Config{NodeID: name, BindAddr: "127.0.0.1", Port: port, Fast: true,
			Meta: Meta{ID: name, Role: "server"}, ReconnectInterval: 200 * time.Millisecond, tune: tune})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	status := func(p *Pool, name string) Status {
		for _, m := range p.Members() {
			if m.Name == name {
				return m.Status
			}
		}
		return ""
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	a := start("a", 0)
	defer a.Shutdown()
	b := start("b", 0)
	_, bp, _ := net.SplitHostPort(b.Addr())
	bport, _ := strconv.Atoi(bp)
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitFor("a to see b alive", func() bool { return status(a, "b") == StatusAlive })
	b.Shutdown()
	waitFor("a to declare b dead", func() bool { return status(a, "b") == StatusFailed })
	b2 := start("b", bport) // no join: it knows nobody
	defer b2.Shutdown()
	waitFor("a to see b alive again", func() bool { return status(a, "b") == StatusAlive })
	waitFor("b to see a", func() bool { return status(b2, "a") == StatusAlive })
}

// A member that comes back at a new address under its old name (a
// Kubernetes pod restarted with a new pod IP), and joins before its old
// address is declared dead (as a pod does), is that member again soon
// after: the member it joined refuses the new address while the old one
// lives, tells it so, and the restarted member joins again until it is
// accepted. Here memberlist never forgets the dead and never pushes and
// pulls on its own (both an hour): without the reclaim time and the
// rejoin, the new address stayed refused ("Conflicting address"), and
// each server of a real cluster's rolling restart took about 30 s to be
// a voter again.
func TestAMemberBackAtANewAddressTakesItsNameBack(t *testing.T) {
	tune := func(c *memberlist.Config) {
		c.GossipToTheDeadTime = time.Hour
		c.PushPullInterval = time.Hour
	}
	start := func(name string) *Pool {
		t.Helper()
		p, err := Start(Config{NodeID: name, BindAddr: "127.0.0.1", Fast: true,
			Meta: Meta{ID: name, Role: "server"}, ReconnectInterval: 200 * time.Millisecond, tune: tune})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	member := func(p *Pool, name string) (Status, string) {
		for _, m := range p.Members() {
			if m.Name == name {
				return m.Status, m.GossipAddr
			}
		}
		return "", ""
	}
	a := start("a")
	defer a.Shutdown()
	b := start("b")
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, _ := member(a, "b"); st == StatusAlive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a never saw b alive")
		}
	}
	old := b.Addr()
	b.Shutdown()
	b2 := start("b") // another port: another address; before a knows b is dead
	defer b2.Shutdown()
	if b2.Addr() == old {
		t.Fatalf("b came back at its old address %s", old)
	}
	if _, err := b2.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, addr := member(a, "b")
		if st == StatusAlive && addr == b2.Addr() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a sees b %s at %s, want alive at %s (its old address %s)", st, addr, b2.Addr(), old)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ServerRaftAddr: a server's Raft address as gossip heard it, an alive
// member's before a failed one's, none for a left one, and none for an ID
// two alive members claim at different addresses (the caller then keeps
// the address it had).
func TestServerRaftAddr(t *testing.T) {
	t0 := time.Now()
	server := func(name, id, addr string, st Status) *Member {
		return &Member{Name: name, Status: st, Since: t0, Meta: Meta{ID: id, RaftAddr: addr, Role: "server"}}
	}
	failedAt := func(m *Member, d time.Duration) *Member { m.Since = t0.Add(d); return m }
	cases := []struct {
		name    string
		members []*Member
		want    string
		ok      bool
	}{
		{"unknown", nil, "", false},
		{"alive", []*Member{server("s1", "id1", "10.0.0.1:7300", StatusAlive)}, "10.0.0.1:7300", true},
		{"failed: its last address", []*Member{server("s1", "id1", "10.0.0.1:7300", StatusFailed)}, "10.0.0.1:7300", true},
		{"left", []*Member{server("s1", "id1", "10.0.0.1:7300", StatusLeft)}, "", false},
		{"back at a new address under a new name", []*Member{
			server("s1-old", "id1", "10.0.0.1:7300", StatusFailed),
			server("s1-new", "id1", "10.0.0.9:7300", StatusAlive),
		}, "10.0.0.9:7300", true},
		{"two lives failed: the later one's", []*Member{
			failedAt(server("s1-a", "id1", "10.0.0.1:7300", StatusFailed), time.Second),
			failedAt(server("s1-b", "id1", "10.0.0.9:7300", StatusFailed), 2*time.Second),
		}, "10.0.0.9:7300", true},
		{"two alive members claim the ID", []*Member{
			server("s1", "id1", "10.0.0.1:7300", StatusAlive),
			server("impostor", "id1", "10.0.0.66:7300", StatusAlive),
		}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Pool{serverNames: map[string]*Member{}}
			for _, m := range tc.members {
				p.serverNames[m.Name] = m
			}
			p.rebuildServersLocked()
			got, ok := p.ServerRaftAddr("id1")
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ServerRaftAddr = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
