package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
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

// Pool is this node's view of the gossip pool, fed by memberlist's event
// delegate.
type Pool struct {
	ml      *memberlist.Memberlist
	tr      *boundTransport
	cfg     Config
	logger  hclog.Logger
	mu      sync.Mutex // guards byName and meta
	byName  map[string]*Member
	meta    Meta
	changed chan struct{}  // capacity 1: a coalesced "something changed"
	save    chan struct{}  // capacity 1: a coalesced "write the peers file"
	stop    chan struct{}  // closed by Shutdown
	wg      sync.WaitGroup // persistPeers, reconnect and a background join
	once    sync.Once
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
		cfg: cfg, logger: cfg.Logger, byName: make(map[string]*Member), meta: cfg.Meta,
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
	mc.Delegate = (*delegate)(p)
	mc.Events = (*delegate)(p)
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

// reconnect tries, every interval, to join one member memberlist declared
// dead (not one that left). memberlist stops gossiping to a dead node after
// GossipToTheDeadTime (30 s on a LAN) and never probes it again, so a
// member declared dead stays dead in this node's view until one of the two
// joins the other: a client agent that marked the servers failed across
// faults stayed "no live server known" 30 s after the heal (the fault
// suite, seed 33498). Serf, under Consul and Nomad, has the
// same loop for the same reason. A join that reaches the member merges the
// two views; one that does not costs a failed dial.
func (p *Pool) reconnect(interval time.Duration) {
	p.every(interval, func() bool {
		var failed []string
		p.mu.Lock()
		for _, m := range p.byName {
			if m.Status == StatusFailed && m.Name != p.cfg.NodeID {
				failed = append(failed, m.GossipAddr)
			}
		}
		p.mu.Unlock()
		if len(failed) > 0 {
			addr := failed[rand.IntN(len(failed))]
			if _, err := p.ml.Join([]string{addr}); err == nil {
				p.logger.Info("reconnected to a member declared dead", "addr", addr)
			}
		}
		return true
	})
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
func (p *Pool) JoinAtStart(addrs []string, retry bool, interval time.Duration) error {
	saved := len(addrs) == 0
	if saved {
		addrs = p.SavedPeers()
	}
	if len(addrs) == 0 {
		return nil
	}
	_, err := p.ml.Join(addrs)
	if err == nil {
		return nil
	}
	if !retry && !saved {
		return fmt.Errorf("join %v: %w (use -retry-join to keep trying)", addrs, err)
	}
	p.logger.Warn("join failed; retrying in the background", "addrs", addrs, "error", err)
	p.goFunc(func() {
		p.every(interval, func() bool {
			if n, err := p.ml.Join(addrs); err == nil && n > 0 {
				p.logger.Info("joined", "addrs", addrs)
				return false
			}
			return true
		})
	})
	return nil
}

func (p *Pool) goFunc(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// SavedPeers returns the addresses recorded in the peers file (nil when
// there is none): a restarted node rejoins through them.
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
	return addrs
}

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
// alive, sorted by name.
func (p *Pool) AliveServers() []Meta {
	var out []Meta
	for _, m := range p.Members() {
		if m.Meta.IsServer() && m.Status == StatusAlive && m.Meta.RaftAddr != "" {
			out = append(out, m.Meta)
		}
	}
	return out
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

// savePeers records the gossip addresses of the other members (servers
// first: they are the ones that stay), so that a restart can rejoin
// without -join.
func (p *Pool) savePeers() {
	if p.cfg.PeersFile == "" {
		return
	}
	var servers, clients []string
	for _, mem := range p.Members() {
		if mem.Name == p.cfg.NodeID || mem.Status == StatusLeft {
			continue
		}
		if mem.Meta.IsServer() {
			servers = append(servers, mem.GossipAddr)
		} else {
			clients = append(clients, mem.GossipAddr)
		}
	}
	addrs := append(servers, clients...)
	if len(addrs) == 0 {
		return
	}
	b, _ := json.Marshal(addrs)
	// Best effort, as the file is: a restart without it needs -join.
	if err := atomicfile.WriteFile(p.cfg.PeersFile, b, 0o600); err != nil {
		p.logger.Debug("peers file not written", "error", err)
	}
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
