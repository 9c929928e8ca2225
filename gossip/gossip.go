package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/internal/atomicfile"
)

// Meta is what each agent gossips about itself.
type Meta struct {
	ID       string
	RaftAddr string `json:",omitempty"` // servers: Raft and internal RPC
	HTTPAddr string
	Role     string // api.RoleServer or api.RoleClient
	// Leaving is gossiped just before a graceful leave, so that every
	// node tells a departure from a failure (memberlist's leave
	// notification does not say which).
	Leaving bool `json:",omitempty"`
	// RPCVersion is the newest internal RPC set a server serves (0: the
	// first; 1: also ApplyBatch). Peers use only what it names, so a
	// rolling upgrade mixes versions safely.
	RPCVersion int `json:",omitempty"`
}

// IsServer reports whether the meta is a server's.
func (m Meta) IsServer() bool { return m.Role == api.RoleServer }

// Status is a member's state as this node last heard it.
type Status string

const (
	StatusAlive  Status = "alive"
	StatusFailed Status = "failed" // memberlist declared it dead
	StatusLeft   Status = "left"   // it left gracefully
)

// Member is one node of the gossip pool.
type Member struct {
	Name       string
	GossipAddr string
	Status     Status
	Since      time.Time // when Status last changed
	Meta       Meta
}

// API is m as the HTTP API shows it.
func (m Member) API(leaderID string, voter bool) api.Member {
	return api.Member{
		Name: m.Name, Role: m.Meta.Role, GossipAddr: m.GossipAddr, RaftAddr: m.Meta.RaftAddr, HTTPAddr: m.Meta.HTTPAddr,
		Status: string(m.Status), Leader: m.Meta.ID != "" && m.Meta.ID == leaderID, Voter: voter,
	}
}

// Config of a Pool.
type Config struct {
	NodeID   string // the memberlist name; required
	BindAddr string // required
	Port     int    // TCP and UDP; 0 picks a free port
	Meta     Meta   // this node's own
	// Fast uses memberlist's local-network timing (faster failure
	// detection); for tests and dev.
	Fast bool
	// PeersFile, when set, records the gossip addresses of the other
	// members, so that a restart can rejoin without -join.
	PeersFile string
	// ReconnectInterval: how often to try to reach one member that
	// memberlist declared dead (zero: 5s; with Fast, 1s).
	ReconnectInterval time.Duration
	// ForgetAfter: a client agent failed or gone for longer is forgotten
	// (dropped from Members, no longer reconnected to), unless Keep says
	// otherwise; zero: DefaultForgetAfter; negative: never. Servers are
	// never forgotten: they are few, and a client agent cut off from all
	// of them for long heals only by reconnecting to one.
	ForgetAfter time.Duration
	// Keep, when set, reports whether a member due to be forgotten must be
	// kept still: a server keeps a node whose plugins are still
	// registered, so that its leader marks and reaps it (a forgotten node
	// is neither failed nor alive to it). Called without the pool's lock.
	Keep func(Member) bool
	Encryption
	Logger hclog.Logger

	tune func(*memberlist.Config) // tests: adjust memberlist's timing
}

// Encryption is how gossip is encrypted; the zero value: not at all.
type Encryption struct {
	// Keyring, when set, encrypts gossip (memberlist's AES-GCM with the
	// keyring's primary key; any installed key decrypts). A member
	// without one of the keys cannot join, nor be heard.
	Keyring *Keyring
	// AcceptPlaintext and SendPlaintext relax a Keyring for turning
	// encryption on in a running cluster (Consul's
	// encrypt_verify_incoming=false and encrypt_verify_outgoing=false):
	// first every agent gets the key with both set, then without
	// SendPlaintext, then without either.
	AcceptPlaintext bool
	SendPlaintext   bool
}

// DefaultForgetAfter is how long a client agent that failed or left stays
// in the pool by default: a minute, twice the servers' default node reap
// interval, so that a short partition heals by reconnecting either way,
// while the members of a fleet whose hosts come and go do not pile up for
// ever. A longer partition heals through the servers, never forgotten.
const DefaultForgetAfter = time.Minute

// Pool is this node's view of the gossip pool, fed by memberlist's event
// delegate.
type Pool struct {
	ml     *memberlist.Memberlist
	tr     *boundTransport
	cfg    Config
	logger hclog.Logger
	mu     sync.Mutex // guards byName, serverNames, servers and meta
	byName map[string]*Member
	meta   Meta
	// serverNames are the members of byName that are servers, and
	// servers the alive ones' metas, sorted by name: AliveServers is
	// called on every RPC of a client agent, and the pool may hold a
	// fleet's members, of which a handful are servers. servers is
	// rebuilt when a server member changes, and never changed in place.
	serverNames map[string]*Member
	servers     []Meta
	// raftAddrs maps a server's node ID to the Raft address gossip last
	// heard for it, rebuilt with servers and read without p.mu: Raft asks
	// it on every RPC it sends (ServerRaftAddr).
	raftAddrs atomic.Pointer[map[string]string]
	// rejoinUntil (unix nanoseconds): a member told this one that it
	// knows this node's name at another address (this node's earlier
	// life, before a restart at a new address); the reconnect loop joins
	// again until then (NotifyConflict, rejoinIfRemembered).
	rejoinUntil atomic.Int64
	changed     chan struct{}  // capacity 1: a coalesced "something changed"
	save        chan struct{}  // capacity 1: a coalesced "write the peers file"
	stop        chan struct{}  // closed by Shutdown
	wg          sync.WaitGroup // persistPeers, reconnect and a background join
	once        sync.Once
}

// Start starts gossip on BindAddr:Port. Join to meet the others.
func Start(cfg Config) (*Pool, error) {
	if cfg.NodeID == "" || cfg.BindAddr == "" {
		return nil, errors.New("gossip: config needs NodeID and BindAddr")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	p := &Pool{
		cfg: cfg, logger: cfg.Logger, byName: make(map[string]*Member), serverNames: make(map[string]*Member), meta: cfg.Meta,
		changed: make(chan struct{}, 1), save: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	mc := memberlist.DefaultLANConfig()
	if cfg.Fast {
		mc = memberlist.DefaultLocalConfig()
	}
	mc.Name = cfg.NodeID
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.Port
	mc.AdvertiseAddr = cfg.BindAddr
	mc.AdvertisePort = cfg.Port
	if cfg.Keyring != nil {
		mc.Keyring = cfg.Keyring.ml
		mc.GossipVerifyIncoming = !cfg.AcceptPlaintext
		mc.GossipVerifyOutgoing = !cfg.SendPlaintext
	}
	// A member back at a new address under its old name (a Kubernetes
	// pod restarted: a new pod IP) takes the name back once the old
	// address is declared dead. memberlist's default (0) refuses it
	// ("Conflicting address") until the dead entry is forgotten,
	// GossipToTheDeadTime later, and a restarted server is no voter
	// until then. A live member keeps its name: a second process under
	// it is still refused.
	mc.DeadNodeReclaimTime = deadNodeReclaimTime
	mc.Delegate = (*delegate)(p)
	mc.Events = (*delegate)(p)
	mc.Conflict = (*delegate)(p)
	// memberlist writes "[DEBUG] ..." lines to a standard logger: let hclog
	// read the level, so that they are not logged at INFO.
	mc.Logger = cfg.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	if cfg.tune != nil {
		cfg.tune(mc)
	}
	tr, err := newBoundTransport(cfg.BindAddr, cfg.Port, mc.Logger)
	if err != nil {
		return nil, fmt.Errorf("start gossip on %s:%d: %w", cfg.BindAddr, cfg.Port, err)
	}
	mc.Transport = tr
	mc.BindPort, mc.AdvertisePort = tr.GetAutoBindPort(), tr.GetAutoBindPort()
	ml, err := memberlist.Create(mc)
	if err != nil {
		tr.Shutdown()
		return nil, fmt.Errorf("start gossip on %s:%d: %w", cfg.BindAddr, cfg.Port, err)
	}
	p.ml, p.tr = ml, tr
	p.set(ml.LocalNode(), StatusAlive)
	p.goFunc(p.persistPeers)
	interval := cfg.ReconnectInterval
	if interval <= 0 {
		interval = 5 * time.Second
		if cfg.Fast {
			interval = time.Second
		}
	}
	p.goFunc(func() { p.reconnect(interval) })
	return p, nil
}

// deadNodeReclaimTime is how long a member must have been dead before
// its name may come back at another address.
const deadNodeReclaimTime = time.Second

// rejoinWindow is how long a node known elsewhere at its old address
// keeps joining again: longer than the failure detector takes to declare
// the old address dead (a few seconds on a LAN) plus deadNodeReclaimTime.
const rejoinWindow = 30 * time.Second

// forgetAfter is ForgetAfter with its default.
func (c Config) forgetAfter() time.Duration {
	if c.ForgetAfter == 0 {
		return DefaultForgetAfter
	}
	return c.ForgetAfter
}

// reconnect tries, every interval, to join one member memberlist declared
// dead (not one that left). memberlist stops gossiping to a dead node after
// GossipToTheDeadTime (30 s on a LAN) and never probes it again, so a
// member declared dead stays dead in this node's view until one of the two
// joins the other: a client agent that marked the servers failed across
// faults stayed "no live server known" 30 s after the heal (the fault
// suite, seed 33498). Serf, under Consul and Nomad, has the
// same loop for the same reason. A join that reaches the member merges the
// two views; one that does not costs a failed dial.
//
// Each round also forgets the client agents gone for longer than
// ForgetAfter, so that neither the members nor this loop's choice grow
// with every host that ever died.
func (p *Pool) reconnect(interval time.Duration) {
	p.every(interval, func() bool {
		p.forget(time.Now())
		if failed := p.othersWith(StatusFailed); len(failed) > 0 {
			addr := failed[rand.IntN(len(failed))]
			if _, err := p.ml.Join([]string{addr}); err == nil {
				p.logger.Info("reconnected to a member declared dead", "addr", addr)
			}
		}
		p.rejoinIfRemembered()
		return true
	})
}

// rejoinIfRemembered joins the alive members again for a while after
// one said it knows this node at another address. Such a member refuses
// this address while the old one is not yet dead (a restarted pod joins
// before its old IP is declared dead), and memberlist would offer it
// again only at its next push-pull, up to 30 s later; each join is a
// push-pull, which the member accepts once the old address has been
// dead for deadNodeReclaimTime. Once the old address is declared dead
// nothing says so any more, hence a window rather than a signal.
func (p *Pool) rejoinIfRemembered() {
	if time.Now().UnixNano() > p.rejoinUntil.Load() {
		return
	}
	// A few members, not all: a fleet's pool holds thousands, and once
	// one member takes the new address its gossip carries it to the rest.
	addrs := p.othersWith(StatusAlive)
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	if len(addrs) > rejoinFanout {
		addrs = addrs[:rejoinFanout]
	}
	if len(addrs) == 0 {
		return
	}
	if n, err := p.ml.Join(addrs); err == nil {
		p.logger.Info("joined again: a member knew this node at its old address", "members", n)
	}
}

// rejoinFanout is how many members a node known at its old address
// joins each round.
const rejoinFanout = 3

// othersWith returns the gossip addresses of the other members in status.
func (p *Pool) othersWith(status Status) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var addrs []string
	for _, m := range p.byName {
		if m.Status == status && m.Name != p.cfg.NodeID {
			addrs = append(addrs, m.GossipAddr)
		}
	}
	return addrs
}

// forget drops the client agents failed or gone for longer than
// ForgetAfter at now that Keep does not keep.
func (p *Pool) forget(now time.Time) {
	after := p.cfg.forgetAfter()
	if after < 0 {
		return
	}
	// Each member judged, and a copy to judge: set changes a member in
	// place under the lock.
	type judged struct {
		ptr *Member
		val Member
	}
	var due []judged
	p.mu.Lock()
	for _, m := range p.byName {
		if forgettable(m, p.cfg.NodeID) && now.Sub(m.Since) > after {
			due = append(due, judged{m, *m})
		}
	}
	p.mu.Unlock()
	var gone []*Member
	for _, m := range due {
		// Asked outside the lock: Keep may read a state, and memberlist
		// waits on this lock to report a change.
		if p.cfg.Keep == nil || !p.cfg.Keep(m.val) {
			gone = append(gone, m.ptr)
		}
	}
	if len(gone) == 0 {
		return
	}
	p.mu.Lock()
	for _, m := range gone {
		// Only the member as judged: set replaces a member whose status
		// changes (it came back meanwhile).
		if p.byName[m.Name] == m {
			delete(p.byName, m.Name)
		}
	}
	p.mu.Unlock()
	p.logger.Debug("forgot members gone for longer than the forget interval", "members", len(gone), "after", after)
}

// forgettable reports whether m may be forgotten once gone long enough:
// a client agent, not alive, not this node.
func forgettable(m *Member, self string) bool {
	return m.Status != StatusAlive && !m.Meta.IsServer() && m.Name != self
}

// every calls fn every d until fn returns false or Shutdown.
func (p *Pool) every(d time.Duration, fn func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		if !fn() {
			return
		}
	}
}

// Keyring is the pool's encryption keyring (nil: gossip in plaintext).
func (p *Pool) Keyring() *Keyring { return p.cfg.Keyring }

// Addr is this node's gossip address.
func (p *Pool) Addr() string {
	n := p.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Join contacts addrs and returns how many answered.
func (p *Pool) Join(addrs []string) (int, error) { return p.ml.Join(addrs) }

// JoinAtStart joins addrs, or, when there are none, the peers saved in
// PeersFile (a restart rejoins without -join). If nobody answers it keeps
// trying in the background every interval, until one does or Shutdown,
// when retry is set or the addresses came from the peers file; otherwise
// it returns the error.
//
// Saved peers are joined one at a time, in the file's order (servers
// first), stopping at the first that answers, as Serf's rejoin does: a
// join is a full state exchange with each address it reaches, and one is
// enough to learn every member. The addresses given are all joined at
// once: the operator named them.
func (p *Pool) JoinAtStart(addrs []string, retry bool, interval time.Duration) error {
	saved := len(addrs) == 0
	join := p.joinAll
	if saved {
		addrs = p.SavedPeers()
		join = p.joinFirst
	}
	if len(addrs) == 0 {
		return nil
	}
	err := join(addrs)
	if err == nil {
		return nil
	}
	if !retry && !saved {
		return fmt.Errorf("join %v: %w (use -retry-join to keep trying)", addrs, err)
	}
	p.logger.Warn("join failed; retrying in the background", "addrs", addrs, "error", err)
	p.goFunc(func() {
		p.every(interval, func() bool {
			if join(addrs) == nil {
				p.logger.Info("joined", "addrs", addrs)
				return false
			}
			return true
		})
	})
	return nil
}

// joinAll joins every address at once; nil once one answered.
func (p *Pool) joinAll(addrs []string) error {
	n, err := p.ml.Join(addrs)
	if n > 0 {
		return nil
	}
	if err == nil {
		err = errors.New("no address answered")
	}
	return err
}

// joinFirst joins the addresses one at a time, in order, until one
// answers (or Shutdown); nil once one did.
func (p *Pool) joinFirst(addrs []string) error {
	var errs []error
	for _, addr := range addrs {
		select {
		case <-p.stop:
			return errors.New("gossip shut down")
		default:
		}
		if n, err := p.ml.Join([]string{addr}); n > 0 {
			return nil
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return errors.New("no address answered")
	}
	return errors.Join(errs...)
}

func (p *Pool) goFunc(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// SavedPeers returns the addresses recorded in the peers file (nil when
// there is none), servers first: a restarted node rejoins through them.
// At most maxRejoinPeers: an older release saved every member, servers
// first, and a fleet's file tried whole would take as long as a dial to
// each dead host.
func (p *Pool) SavedPeers() []string {
	if p.cfg.PeersFile == "" {
		return nil
	}
	b, err := os.ReadFile(p.cfg.PeersFile)
	if err != nil {
		return nil
	}
	var addrs []string
	json.Unmarshal(b, &addrs)
	if len(addrs) > maxRejoinPeers {
		addrs = addrs[:maxRejoinPeers]
	}
	return addrs
}

const (
	// maxSavedClients is how many client agents the peers file records
	// besides the servers, chosen at random among the alive ones: a
	// rejoin needs one member that answers, and the servers, saved
	// whole, are the likeliest; the clients are there for a restart
	// while every server is down.
	maxSavedClients = 16
	// maxRejoinPeers bounds the saved addresses a rejoin tries.
	maxRejoinPeers = 64
)

// Members returns a copy of every member, sorted by name.
func (p *Pool) Members() []Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Member, 0, len(p.byName))
	for _, mem := range p.byName {
		out = append(out, *mem)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// AliveServers returns the servers (by their meta) that gossip says are
// alive, sorted by name: a copy of a list kept as server members change,
// whatever the pool's size.
func (p *Pool) AliveServers() []Meta {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.servers)
}

// NumMembers is how many members memberlist counts alive or suspect: the
// fleet's size as this node sees it.
func (p *Pool) NumMembers() int { return p.ml.NumMembers() }

// indexLocked files m, just set in byName, among the servers or not, and
// rebuilds the alive servers when it is, or was, one. Callers hold p.mu.
func (p *Pool) indexLocked(m *Member) {
	_, was := p.serverNames[m.Name]
	if m.Meta.IsServer() {
		if p.serverNames == nil {
			p.serverNames = make(map[string]*Member)
		}
		p.serverNames[m.Name] = m
	} else {
		delete(p.serverNames, m.Name)
	}
	if was || m.Meta.IsServer() {
		p.rebuildServersLocked()
	}
}

// rebuildServersLocked makes servers anew from serverNames. Callers hold
// p.mu.
func (p *Pool) rebuildServersLocked() {
	var out []Member
	for _, m := range p.serverNames {
		if m.Status == StatusAlive && m.Meta.RaftAddr != "" {
			out = append(out, *m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	metas := make([]Meta, len(out))
	for i, m := range out {
		metas[i] = m.Meta
	}
	p.servers = metas
	p.rebuildRaftAddrsLocked()
}

// rebuildRaftAddrsLocked maps each server's node ID to its Raft address:
// an alive member's before a failed one's (a server back at a new address
// while its old life is not yet declared dead), among failed ones the one
// that failed last (its latest life), and no address at all for an ID two
// alive members claim at different addresses (a member claiming another's
// ID: the caller keeps the address it had, see ServerRaftAddr). Callers
// hold p.mu.
func (p *Pool) rebuildRaftAddrsLocked() {
	best := make(map[string]*Member, len(p.serverNames))
	ambiguous := map[string]bool{}
	for _, m := range p.serverNames {
		id, addr := m.Meta.ID, m.Meta.RaftAddr
		if id == "" || addr == "" || m.Status == StatusLeft {
			continue
		}
		b := best[id]
		switch alive := m.Status == StatusAlive; {
		case b == nil:
			best[id] = m
		case alive && b.Status == StatusAlive:
			if b.Meta.RaftAddr != addr {
				ambiguous[id] = true
			}
		case alive || (b.Status != StatusAlive && m.Since.After(b.Since)):
			best[id] = m
		}
	}
	addrs := make(map[string]string, len(best))
	for id, m := range best {
		if !ambiguous[id] {
			addrs[id] = m.Meta.RaftAddr
		}
	}
	p.raftAddrs.Store(&addrs)
}

// ServerRaftAddr returns the Raft address gossip last heard for the
// server with node ID id, and false when it knows none (or two members
// claim the ID at different addresses). Raft dials a server by what this
// says (cluster's raft transport), so a server that came back at a new
// address, or a whole cluster rescheduled onto new addresses at once, is
// reached where it is now, not where the Raft configuration last put it.
func (p *Pool) ServerRaftAddr(id string) (string, bool) {
	m := p.raftAddrs.Load()
	if m == nil {
		return "", false
	}
	addr, ok := (*m)[id]
	return addr, ok
}

// Changed is signalled (coalesced) whenever a member changed.
func (p *Pool) Changed() <-chan struct{} { return p.changed }

// MarkLeft records that the node with this ID is leaving (it said so by
// RPC, which does not depend on gossip reaching everyone), so that the
// leader does not add it back while gossip still calls it alive. Its next
// join (a restart) makes it alive again.
func (p *Pool) MarkLeft(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, mem := range p.byName {
		if mem.Meta.ID == id && mem.Status != StatusLeft {
			mem.Status, mem.Since = StatusLeft, time.Now()
			p.indexLocked(mem)
		}
	}
}

// AnnounceLeaving gossips this node's leave intent.
func (p *Pool) AnnounceLeaving(timeout time.Duration) error {
	p.mu.Lock()
	p.meta.Leaving = true
	p.mu.Unlock()
	return p.ml.UpdateNode(timeout)
}

// Leave leaves the pool gracefully.
func (p *Pool) Leave(timeout time.Duration) error { return p.ml.Leave(timeout) }

// Shutdown stops gossip. Idempotent.
func (p *Pool) Shutdown() error {
	var err error
	p.once.Do(func() {
		close(p.stop)
		p.tr.stopDialing() // a reconnect's dial to a dead member ends now
		p.wg.Wait()
		err = p.ml.Shutdown()
	})
	return err
}

// persistPeers writes the peers file whenever the members changed, until
// Shutdown.
func (p *Pool) persistPeers() {
	for {
		select {
		case <-p.stop:
			return
		case <-p.save:
			p.savePeers()
		}
	}
}

// savePeers records the gossip addresses of the servers (first: they are
// the ones that stay) and of a sample of the alive client agents, so that
// a restart can rejoin without -join.
func (p *Pool) savePeers() {
	if p.cfg.PeersFile == "" {
		return
	}
	addrs := p.peersToSave()
	if len(addrs) == 0 {
		return
	}
	b, _ := json.Marshal(addrs)
	// Best effort, as the file is: a restart without it needs -join.
	if err := atomicfile.WriteFile(p.cfg.PeersFile, b, 0o600); err != nil {
		p.logger.Debug("peers file not written", "error", err)
	}
}

// peersToSave returns the addresses savePeers records: every server that
// did not leave, sorted by name, then at most maxSavedClients alive client
// agents chosen at random (a reservoir sample: one pass, whatever the
// fleet's size).
func (p *Pool) peersToSave() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var servers []*Member
	for _, m := range p.serverNames {
		if m.Name != p.cfg.NodeID && m.Status != StatusLeft {
			servers = append(servers, m)
		}
	}
	slices.SortFunc(servers, func(a, b *Member) int { return strings.Compare(a.Name, b.Name) })
	var clients []string
	seen := 0
	for _, m := range p.byName {
		if m.Name == p.cfg.NodeID || m.Meta.IsServer() || m.Status != StatusAlive {
			continue
		}
		seen++
		if len(clients) < maxSavedClients {
			clients = append(clients, m.GossipAddr)
		} else if i := rand.IntN(seen); i < maxSavedClients {
			clients[i] = m.GossipAddr
		}
	}
	addrs := make([]string, 0, len(servers)+len(clients))
	for _, m := range servers {
		addrs = append(addrs, m.GossipAddr)
	}
	return append(addrs, clients...)
}

func (p *Pool) set(n *memberlist.Node, st Status) {
	var meta Meta
	if err := json.Unmarshal(n.Meta, &meta); err != nil || (meta.Role != api.RoleServer && meta.Role != api.RoleClient) {
		return // not one of ours
	}
	if meta.Leaving && st == StatusAlive {
		st = StatusLeft // it announced its departure: never make it a voter again
	}
	p.mu.Lock()
	cur, ok := p.byName[n.Name]
	if ok && cur.Status == StatusLeft && st == StatusFailed {
		st = StatusLeft // gone after announcing it (the announcement may have come by RPC)
	}
	if !ok || cur.Status != st {
		cur = &Member{Name: n.Name, Status: st, Since: time.Now()}
		p.byName[n.Name] = cur
	}
	cur.GossipAddr = n.Address()
	cur.Meta = meta
	p.indexLocked(cur)
	p.mu.Unlock()
	// memberlist calls this synchronously, holding its own locks: no
	// file I/O here (a slow disk would stall gossip); persistPeers
	// writes the file.
	for _, ch := range []chan struct{}{p.save, p.changed} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// delegate is the Pool as memberlist's Delegate and EventDelegate; only
// NodeMeta carries anything.
type delegate Pool

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	b, _ := json.Marshal(d.meta)
	d.mu.Unlock()
	if len(b) > limit {
		return nil
	}
	return b
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// NotifyConflict: memberlist refused an alive message naming a known
// member at another address. When the name is this node's, another
// member holds this node's earlier address (a restart at a new one):
// the reconnect loop joins again (rejoinIfRemembered).
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	p := (*Pool)(d)
	if existing.Name == p.cfg.NodeID {
		p.rejoinUntil.Store(time.Now().Add(rejoinWindow).UnixNano())
	}
}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { (*Pool)(d).set(n, StatusAlive) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { (*Pool)(d).set(n, StatusAlive) }
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	var meta Meta
	json.Unmarshal(n.Meta, &meta)
	if meta.Leaving {
		(*Pool)(d).set(n, StatusLeft)
	} else {
		(*Pool)(d).set(n, StatusFailed)
	}
}
