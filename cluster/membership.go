package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/plugreg/plugreg/api"
)

// MemberMeta is what each server gossips about itself.
type MemberMeta struct {
	ID       string
	RaftAddr string // server port: Raft and internal RPC
	HTTPAddr string
	Role     string // "server"
	// Leaving is gossiped just before a graceful leave, so that every
	// node tells a departure from a failure (memberlist's leave
	// notification does not say which).
	Leaving bool `json:",omitempty"`
}

// MemberStatus is a member's state as this node last heard it.
type MemberStatus string

const (
	StatusAlive  MemberStatus = "alive"
	StatusFailed MemberStatus = "failed" // memberlist declared it dead
	StatusLeft   MemberStatus = "left"   // it left gracefully
)

// Member is one node of the gossip pool.
type Member struct {
	Name       string
	GossipAddr string
	Status     MemberStatus
	Since      time.Time // when Status last changed
	Meta       MemberMeta
}

// members is this node's view of the gossip pool, fed by memberlist's
// event delegate. It keeps failed and left members (memberlist forgets
// them) so the leader can act on how long they have been gone.
type members struct {
	mu      sync.Mutex // guards byName and meta
	byName  map[string]*Member
	changed chan struct{} // capacity 1: a coalesced "something changed"
	save    chan struct{} // capacity 1: a coalesced "write the peers file"
	meta    MemberMeta    // this node's own
	peers   string        // file of known gossip addresses, for rejoin
}

func newMembers(meta MemberMeta, peersFile string) *members {
	return &members{byName: make(map[string]*Member), changed: make(chan struct{}, 1), save: make(chan struct{}, 1), meta: meta, peers: peersFile}
}

// NodeMeta, NotifyMsg, GetBroadcasts, LocalState, MergeRemoteState make
// members a memberlist.Delegate; only NodeMeta carries anything.
func (m *members) NodeMeta(limit int) []byte {
	m.mu.Lock()
	b, _ := json.Marshal(m.meta)
	m.mu.Unlock()
	if len(b) > limit {
		return nil
	}
	return b
}
func (m *members) NotifyMsg([]byte)                           {}
func (m *members) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (m *members) LocalState(join bool) []byte                { return nil }
func (m *members) MergeRemoteState(buf []byte, join bool)     {}

func (m *members) NotifyJoin(n *memberlist.Node)   { m.set(n, StatusAlive) }
func (m *members) NotifyUpdate(n *memberlist.Node) { m.set(n, StatusAlive) }
func (m *members) NotifyLeave(n *memberlist.Node) {
	var meta MemberMeta
	json.Unmarshal(n.Meta, &meta)
	if meta.Leaving {
		m.set(n, StatusLeft)
	} else {
		m.set(n, StatusFailed)
	}
}

// markLeft records that the server with this node ID is leaving (it told
// the leader by RPC, which does not depend on gossip reaching everyone), so
// that reconcile does not add it back while gossip still calls it alive.
// Its next join (a restart) makes it alive again.
func (m *members) markLeft(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mem := range m.byName {
		if mem.Meta.ID == id && mem.Status != StatusLeft {
			mem.Status, mem.Since = StatusLeft, time.Now()
		}
	}
}

// setLeaving marks this node's own meta as leaving.
func (m *members) setLeaving() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.meta.Leaving = true
}

func (m *members) set(n *memberlist.Node, st MemberStatus) {
	var meta MemberMeta
	if err := json.Unmarshal(n.Meta, &meta); err != nil || meta.Role != "server" {
		return // not one of ours
	}
	if meta.Leaving && st == StatusAlive {
		st = StatusLeft // it announced its departure: never make it a voter again
	}
	m.mu.Lock()
	cur, ok := m.byName[n.Name]
	if ok && cur.Status == StatusLeft && st == StatusFailed {
		st = StatusLeft // gone after announcing it (the announcement may have come by RPC)
	}
	if !ok || cur.Status != st {
		cur = &Member{Name: n.Name, Status: st, Since: time.Now()}
		m.byName[n.Name] = cur
	}
	cur.GossipAddr = n.Address()
	cur.Meta = meta
	m.mu.Unlock()
	// memberlist calls this synchronously, holding its own locks: no
	// file I/O here (a slow disk would stall gossip). The Server's
	// persistPeers writes the file.
	for _, ch := range []chan struct{}{m.save, m.changed} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// API is m as the HTTP API shows it.
func (m Member) API(leaderID string, voter bool) api.Member {
	role := m.Meta.Role
	if role == "" {
		role = api.RoleServer
	}
	return api.Member{
		Name: m.Name, Role: role, GossipAddr: m.GossipAddr, RaftAddr: m.Meta.RaftAddr, HTTPAddr: m.Meta.HTTPAddr,
		Status: string(m.Status), Leader: m.Meta.ID != "" && m.Meta.ID == leaderID, Voter: voter,
	}
}

// list returns a copy of every member, sorted by name.
func (m *members) list() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.byName))
	for _, mem := range m.byName {
		out = append(out, *mem)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// persistPeers writes the peers file whenever the members changed, until
// the server shuts down.
func (s *Server) persistPeers() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.members.save:
			s.members.savePeers()
		}
	}
}

// savePeers records the gossip addresses of the other servers, so that a
// restart can rejoin without -join.
func (m *members) savePeers() {
	var addrs []string
	for _, mem := range m.list() {
		if mem.Name != m.self() && mem.Status != StatusLeft {
			addrs = append(addrs, mem.GossipAddr)
		}
	}
	if len(addrs) == 0 {
		return
	}
	b, _ := json.Marshal(addrs)
	tmp := m.peers + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, m.peers)
	}
}

func (m *members) self() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.meta.ID
}

func loadPeers(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var addrs []string
	json.Unmarshal(b, &addrs)
	return addrs
}

// newMemberlist starts gossip on bind:port with m as delegate.
func (s *Server) newMemberlist() (*memberlist.Memberlist, error) {
	mc := memberlist.DefaultLANConfig()
	if s.cfg.GossipFast {
		mc = memberlist.DefaultLocalConfig()
	}
	mc.Name = s.cfg.NodeID
	mc.BindAddr = s.cfg.BindAddr
	mc.BindPort = s.cfg.GossipPort
	mc.AdvertiseAddr = s.cfg.BindAddr
	mc.AdvertisePort = s.cfg.GossipPort
	mc.Delegate = s.members
	mc.Events = s.members
	mc.Logger = s.logger.Named("memberlist").StandardLogger(nil)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("start gossip on %s:%d: %w", s.cfg.BindAddr, s.cfg.GossipPort, err)
	}
	return ml, nil
}

func peersFile(dataDir string) string { return filepath.Join(dataDir, "gossip-peers.json") }
