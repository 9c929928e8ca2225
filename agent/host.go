package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
)

// Writer is what Host writes through: a server's or a client agent's
// Backend.
type Writer interface {
	NodeID() string
	Register(ctx context.Context, p *api.PluginInfo) (api.WriteResult, error)
	Deregister(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error)
	// SyncHost makes an anti-entropy round's writes as one (see
	// backend.Backend); api.ErrUnsupported says a server does not know
	// how yet, and nothing was sent.
	SyncHost(ctx context.Context, req api.HostSyncRequest) (api.HostSyncResult, error)
	Query(ctx context.Context, q api.Query) (*api.QueryResult, error)
}

// HostConfig configures a Host.
type HostConfig struct {
	Backend Writer
	// Sources are the plugin sources this agent runs (api.SourceKubelet,
	// api.SourceStub): the instances of its node whose Options carry one
	// of them are the host's, and anti-entropy removes those the host no
	// longer has. Instances of the node registered otherwise (by hand,
	// over HTTP) are left alone.
	Sources []string
	// SyncInterval between anti-entropy rounds (zero: 30s), scaled with
	// the fleet (Members) and jittered: each wait is drawn from half to
	// one and a half times the scaled interval. A round that fails is
	// retried sooner, with jittered backoff from 1s: after a partition
	// heals, the host's registrations are right again within seconds.
	SyncInterval time.Duration
	// WriteTimeout bounds each write (zero: 10s).
	WriteTimeout time.Duration
	// LiveServers, when set, reports how many servers this agent's gossip
	// sees alive. Run polls it every second and makes a round as soon as
	// the number rises (a partition healed, servers came back): the
	// reconnect that matters, even when the host wrote nothing meanwhile
	// and saw no failure.
	LiveServers func() int
	// Members, when set, reports how many members this agent's gossip
	// knows: the fleet's size. Above aeScaleThreshold the interval grows
	// by one SyncInterval each time the fleet doubles (Consul's
	// anti-entropy scale factor), so that the servers' linearizable reads
	// grow as N/log N rather than N; and the round after servers come
	// back waits a random delay of up to a second for every serverUpRate
	// members (at most the scaled interval), so that a server restart
	// does not get every host's read in the same second.
	Members func() int
	Logger  hclog.Logger
}

// Host is the registrations a host's agent makes on its host's behalf:
// every plugin source on the host (the kubelet-protocol watcher, the
// plugin socket) registers and deregisters through it, and it keeps the
// registry true to them (anti-entropy, as Consul's agent does for its
// services): what the host has is registered, unchanged registrations are
// not rewritten, and what the host no longer has is removed, only from
// this node (a conditional deregister), never from a host that has since
// taken the instance over.
type Host struct {
	cfg    HostConfig
	be     Writer
	node   string
	logger hclog.Logger

	mu      sync.Mutex // guards desired, ready, stats
	desired map[key]*api.PluginInfo
	ready   map[string]bool // sources that finished their first pass

	keys  [64]sync.Mutex // striped per key: one write per instance at a time
	kick  chan struct{}  // capacity 1: a coalesced "sync soon"
	stats HostStats
	// rand draws from [0, n) for the schedule's jitter (tests fix it).
	rand func(n int64) int64
}

// HostStats count what anti-entropy did. Writes counts its calls that
// wrote: one per instance one at a time, one per SyncHost otherwise (a
// log entry each).
type HostStats struct {
	Rounds, Failed, Registered, Deregistered, Writes int
}

type key struct{ typ, name, alloc string }

func keyOf(p *api.PluginInfo) key { return key{p.Type, p.Name, p.AllocID} }

// NewHost returns a Host; Run it.
func NewHost(cfg HostConfig) (*Host, error) {
	if cfg.Backend == nil {
		return nil, errors.New("agent: host needs a Backend")
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = 30 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Host{
		cfg: cfg, be: cfg.Backend, node: cfg.Backend.NodeID(), logger: cfg.Logger,
		desired: make(map[key]*api.PluginInfo), ready: make(map[string]bool), kick: make(chan struct{}, 1),
		rand: rand.Int64N,
	}, nil
}

// NodeID is the host's node ID, stamped on every registration.
func (h *Host) NodeID() string { return h.node }

func (h *Host) lock(k key) func() {
	m := &h.keys[stripe(k)]
	m.Lock()
	return m.Unlock
}

// stripe is k's lock in Host.keys.
func stripe(k key) int {
	f := fnv.New32a()
	f.Write([]byte(k.typ + "\x00" + k.name + "\x00" + k.alloc))
	return int(f.Sum32() % uint32(len(Host{}.keys)))
}

// lockAll locks the stripes of keys, in stripe order (Put and Deregister
// hold one at a time, and lockAll's callers take theirs in one order: no
// two can wait on each other).
func (h *Host) lockAll(keys []key) func() {
	stripes := make([]int, 0, len(keys))
	for _, k := range keys {
		stripes = append(stripes, stripe(k))
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	for _, i := range stripes {
		h.keys[i].Lock()
	}
	return func() {
		for _, i := range stripes {
			h.keys[i].Unlock()
		}
	}
}

// Register registers info for this host (its NodeID is set to the host's)
// and remembers it: if the write fails, anti-entropy makes it later. info
// is validated where it entered the agent (api.ValidateNewPlugin: the
// plugin socket, a kubelet plugin socket's GetInfo), once, and by the
// server where it is encoded for the log.
func (h *Host) Register(ctx context.Context, info *api.PluginInfo) error {
	_, err := h.Put(ctx, info)
	return err
}

// Put is Register returning the write's result (its Raft index).
func (h *Host) Put(ctx context.Context, info *api.PluginInfo) (api.WriteResult, error) {
	p := info.Copy()
	p.NodeID = h.node
	k := keyOf(p)
	defer h.lock(k)()
	h.mu.Lock()
	h.desired[k] = p
	h.mu.Unlock()
	return h.register(ctx, p)
}

// Deregister removes info from this host: it is forgotten at once, and
// deregistered from the registry if it is still this node's there.
func (h *Host) Deregister(ctx context.Context, info *api.PluginInfo) error {
	k := keyOf(info)
	defer h.lock(k)()
	h.mu.Lock()
	delete(h.desired, k)
	h.mu.Unlock()
	return h.deregister(ctx, k, 0)
}

// Ready says that source has made its first pass (registered what the host
// has at start). Anti-entropy removes nothing before every source is
// ready: after a restart, an instance not yet re-discovered is not gone.
func (h *Host) Ready(source string) {
	h.mu.Lock()
	h.ready[source] = true
	h.mu.Unlock()
	h.Resync()
}

// Resync asks for an anti-entropy round soon (on reconnect).
func (h *Host) Resync() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Plugins returns copies of what the host has, by type, name and alloc.
func (h *Host) Plugins() []*api.PluginInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*api.PluginInfo, 0, len(h.desired))
	for _, p := range h.desired {
		out = append(out, p.Copy())
	}
	slices.SortFunc(out, func(a, b *api.PluginInfo) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(a.Name, b.Name), strings.Compare(a.AllocID, b.AllocID))
	})
	return out
}

// Stats returns what anti-entropy has done so far.
func (h *Host) Stats() HostStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

func (h *Host) register(ctx context.Context, p *api.PluginInfo) (api.WriteResult, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.WriteTimeout)
	defer cancel()
	res, err := h.be.Register(ctx, p)
	h.noteWrite(err)
	return res, err
}

// deregister removes k if it is still this node's (and, with ifIndex, was
// last changed at ifIndex); another node's instance is not this host's to
// remove, so a conflict is success.
func (h *Host) deregister(ctx context.Context, k key, ifIndex uint64) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.WriteTimeout)
	defer cancel()
	_, err := h.be.Deregister(ctx, api.DeregisterRequest{Type: k.typ, Name: k.name, AllocID: k.alloc, IfNodeID: h.node, IfModifyIndex: ifIndex})
	if errors.Is(err, api.ErrConflict) {
		return nil
	}
	h.noteWrite(err)
	return err
}

// noteWrite asks for a round soon after a failure that a retry may cure
// (the cluster was unreachable or had no leader): Run then retries with
// backoff until it succeeds.
func (h *Host) noteWrite(err error) {
	var coded api.Coded
	if err != nil && errors.As(err, &coded) {
		h.Resync()
	}
}

// owned reports whether p is an instance this host keeps right.
func (h *Host) owned(p *api.PluginInfo) bool {
	return p.NodeID == h.node && slices.Contains(h.cfg.Sources, p.Options[api.OptionSource])
}

// Sync makes one anti-entropy round: it reads the node's instances (a
// linearizable read: a lagging server's answer would cost a round, e.g.
// show instances already reaped), then registers what is missing or
// different and removes what the host no longer has, with the host's
// wish checked again under each instance's lock. The writes go as one
// (SyncHost: one log entry for the host's round, a few when it has more
// than one entry carries); while a server does not know how, one
// instance at a time.
func (h *Host) Sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.WriteTimeout)
	defer cancel()
	res, err := h.be.Query(ctx, api.Query{Kind: api.QueryNode, NodeID: h.node})
	if err != nil {
		return fmt.Errorf("anti-entropy: read node %s: %w", h.node, err)
	}
	have := make(map[key]*api.PluginInfo)
	for _, p := range res.Plugins {
		if h.owned(p) {
			have[keyOf(p)] = p
		}
	}
	var r round
	wanted := make(map[key]bool)
	for _, want := range h.Plugins() {
		wanted[keyOf(want)] = true
		if got := have[keyOf(want)]; got == nil || !api.SameContent(got, want) {
			r.register = append(r.register, want)
		}
	}
	if h.allReady() {
		for k, got := range have {
			if wanted[k] {
				continue
			}
			r.deregister = append(r.deregister, api.HostDeregistration{Type: k.typ, Name: k.name, AllocID: k.alloc, IfModifyIndex: got.ModifyIndex})
		}
		// In key order: a round's writes do not depend on map order.
		slices.SortFunc(r.deregister, func(a, b api.HostDeregistration) int {
			return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(a.Name, b.Name), strings.Compare(a.AllocID, b.AllocID))
		})
	}
	if err := h.syncBatched(ctx, &r); errors.Is(err, api.ErrUnsupported) {
		h.syncOneByOne(ctx, &r)
	}
	h.mu.Lock()
	h.stats.Rounds++
	h.stats.Registered += r.registered
	h.stats.Deregistered += r.deregistered
	h.stats.Writes += r.writes
	if len(r.errs) > 0 {
		h.stats.Failed++
	}
	h.mu.Unlock()
	if r.registered+r.deregistered > 0 {
		h.logger.Info("anti-entropy corrected the registry", "registered", r.registered, "deregistered", r.deregistered, "writes", r.writes)
	}
	return errors.Join(r.errs...)
}

// round is one anti-entropy round: what it found to write, what it did.
type round struct {
	register   []*api.PluginInfo // the host's wish as the round read it
	deregister []api.HostDeregistration

	registered, deregistered int
	writes                   int // calls that wrote (log entries, but for refusals)
	errs                     []error
	done                     int // writes of register, then deregister, made
}

// syncBatched makes r's writes in as few SyncHost calls as their bounds
// allow, each under the locks of its instances with the host's wish
// checked again. It answers api.ErrUnsupported, having written nothing,
// when a server does not know SyncHost.
func (h *Host) syncBatched(ctx context.Context, r *round) error {
	for r.done < len(r.register)+len(r.deregister) {
		keys := h.nextChunk(r)
		err := h.syncChunk(ctx, r, keys)
		if errors.Is(err, api.ErrUnsupported) {
			return err
		}
		r.done += len(keys)
	}
	return nil
}

// nextChunk is the keys of r's next writes (from r.done) that one
// request carries.
func (h *Host) nextChunk(r *round) []key {
	var keys []key
	size := len(h.node)
	for i := r.done; i < len(r.register)+len(r.deregister) && len(keys) < api.MaxHostSyncWrites; i++ {
		var k key
		var n int
		if i < len(r.register) {
			k, n = keyOf(r.register[i]), api.HostSyncSize(r.register[i])
		} else {
			d := r.deregister[i-len(r.register)]
			k, n = key{d.Type, d.Name, d.AllocID}, d.Size()
		}
		if len(keys) > 0 && size+n > api.MaxHostSyncBytes {
			break
		}
		keys, size = append(keys, k), size+n
	}
	return keys
}

// syncChunk writes the chunk of r starting at r.done, of keys, as one
// SyncHost under the keys' locks: a registration only if the host still
// wants it as the round read it, a removal only if it still does not
// want it (as the single writes check).
func (h *Host) syncChunk(ctx context.Context, r *round, keys []key) error {
	defer h.lockAll(keys)()
	req := api.HostSyncRequest{NodeID: h.node}
	h.mu.Lock()
	for i := range keys {
		if j := r.done + i; j < len(r.register) {
			if cur := h.desired[keys[i]]; cur != nil && api.SameContent(cur, r.register[j]) {
				req.Register = append(req.Register, cur.Copy())
			}
		} else if _, wanted := h.desired[keys[i]]; !wanted {
			req.Deregister = append(req.Deregister, r.deregister[j-len(r.register)])
		}
	}
	h.mu.Unlock()
	if req.Writes() == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, h.cfg.WriteTimeout)
	defer cancel()
	res, err := h.be.SyncHost(wctx, req)
	if errors.Is(err, api.ErrUnsupported) {
		return err
	}
	h.noteWrite(err)
	if err != nil {
		r.errs = append(r.errs, err)
		return err
	}
	r.writes++
	refused := make(map[int]bool, len(res.Refused))
	for _, i := range res.Refused {
		refused[i] = true
	}
	for i, p := range req.Register {
		if refused[i] {
			// Another node's instance, as a single registration's
			// conflict says.
			r.errs = append(r.errs, fmt.Errorf("register %s/%s/%s: %w: the instance belongs to another node", p.Type, p.Name, p.AllocID, api.ErrConflict))
			continue
		}
		r.registered++
	}
	// A removal refused is an instance no longer this node's to remove
	// (taken over, or changed since it was read): success, as the
	// single conditional deregister's conflict is.
	for i := range req.Deregister {
		if !refused[len(req.Register)+i] {
			r.deregistered++
		}
	}
	return nil
}

// syncOneByOne makes r's writes from r.done one instance at a time, as
// hosts did before SyncHost: each under its instance's lock, with the
// host's wish checked again.
func (h *Host) syncOneByOne(ctx context.Context, r *round) {
	for ; r.done < len(r.register); r.done++ {
		want := r.register[r.done]
		k := keyOf(want)
		unlock := h.lock(k)
		h.mu.Lock()
		cur := h.desired[k]
		h.mu.Unlock()
		if cur != nil && api.SameContent(cur, want) { // still wanted, as it was
			if _, err := h.register(ctx, cur); err != nil {
				r.errs = append(r.errs, err)
			} else {
				r.registered++
				r.writes++
			}
		}
		unlock()
	}
	for _, d := range r.deregister[r.done-len(r.register):] {
		k := key{d.Type, d.Name, d.AllocID}
		unlock := h.lock(k)
		h.mu.Lock()
		_, wanted := h.desired[k]
		h.mu.Unlock()
		if !wanted {
			if err := h.deregister(ctx, k, d.IfModifyIndex); err != nil {
				r.errs = append(r.errs, err)
			} else {
				r.deregistered++
				r.writes++
			}
		}
		unlock()
	}
	r.done = len(r.register) + len(r.deregister)
}
func (h *Host) allReady() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.cfg.Sources {
		if !h.ready[s] {
			return false
		}
	}
	return true
}

// Run syncs every SyncInterval (scaled and jittered: syncWait), soon after
// Resync or, spread over serverUpDelay, after the servers came back, and
// with backoff while rounds fail, until ctx ends.
func (h *Host) Run(ctx context.Context) {
	if h.cfg.LiveServers != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.watchServers(ctx)
		}()
		defer func() { <-done }()
	}
	backoff := time.Second
	t := time.NewTimer(syncWait(h.interval(), h.rand))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		}
		interval := h.interval()
		wait := syncWait(interval, h.rand)
		if err := h.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			// Jittered too: the hosts that failed together (a server
			// outage) must not retry together.
			wait = syncWait(backoff, h.rand)
			h.logger.Debug("anti-entropy round failed; retrying", "in", wait, "error", err)
			backoff = min(backoff*2, interval)
		} else {
			backoff = time.Second
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
	}
}

// aeScaleThreshold is the fleet's size up to which anti-entropy runs every
// SyncInterval (Consul's agent/ae: 128).
const aeScaleThreshold = 128

// serverUpRate is how many hosts a second, fleet-wide, make the round
// after servers came back: one linearizable read each on the servers
// that just returned.
const serverUpRate = 200

// aeScaleFactor is Consul's: 1 up to aeScaleThreshold members, and one
// more each time the fleet doubles past it (8 at 10,000; 10 at 50,000).
func aeScaleFactor(members int) int {
	if members <= aeScaleThreshold {
		return 1
	}
	return 1 + int(math.Ceil(math.Log2(float64(members))-math.Log2(aeScaleThreshold)))
}

// members is the fleet's size as the agent's gossip sees it (1 unknown).
func (h *Host) members() int {
	if h.cfg.Members == nil {
		return 1
	}
	return h.cfg.Members()
}

// interval is SyncInterval scaled to the fleet.
func (h *Host) interval() time.Duration {
	return h.cfg.SyncInterval * time.Duration(aeScaleFactor(h.members()))
}

// syncWait draws a wait from [d/2, 3d/2): on average d, and the hosts'
// rounds, however they started, spread over the interval rather than
// stay in step.
func syncWait(d time.Duration, rnd func(int64) int64) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(rnd(int64(d)))
}

// serverUpDelay draws the wait before the round after servers came back:
// from [0, spread), spread one second for every serverUpRate members, at
// most interval (the scaled interval: a round comes by then anyway).
func serverUpDelay(members int, interval time.Duration, rnd func(int64) int64) time.Duration {
	spread := min(time.Duration(members)*time.Second/serverUpRate, interval)
	if spread <= 0 {
		return 0
	}
	return time.Duration(rnd(int64(spread)))
}

// watchServers asks for a round, after serverUpDelay, whenever the number
// of live servers rises. It ends with ctx; Run waits for it.
func (h *Host) watchServers(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var due <-chan time.Time // the round asked for, when pending
	last := h.cfg.LiveServers()
	for {
		select {
		case <-ctx.Done():
			return
		case <-due:
			due = nil
			h.Resync()
			continue
		case <-t.C:
		}
		n := h.cfg.LiveServers()
		if n > last && due == nil {
			delay := serverUpDelay(h.members(), h.interval(), h.rand)
			h.logger.Debug("servers came back; anti-entropy round", "live", n, "before", last, "in", delay)
			due = time.After(delay)
		}
		last = n
	}
}
