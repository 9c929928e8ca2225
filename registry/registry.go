package registry

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// PluginDispenser turns an instance into a client for it (Nomad's
// dynamicplugins.PluginDispenser). It runs outside every registry lock.
type PluginDispenser func(info *api.PluginInfo) (interface{}, error)

// Registry is the cluster-wide plugin registry. Reads are served from this
// node's applied state and return the index they reflect; writes return
// once applied on this node, so a read or watch here afterwards sees them.
type Registry interface {
	RegisterPlugin(ctx context.Context, info *api.PluginInfo) (api.WriteResult, error)
	DeregisterPlugin(ctx context.Context, ptype, name, allocID string) (api.WriteResult, error)
	DeregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error)

	Types() ([]string, uint64)
	ListPlugins(ptype string) ([]*api.PluginInfo, uint64)
	Instances(ptype, name string) ([]*api.PluginInfo, uint64)
	PluginForAlloc(ptype, name, allocID string) (*api.PluginInfo, uint64, error)

	DispensePlugin(ptype, name string) (interface{}, error)
	StubDispenserForType(ptype string, dispenser PluginDispenser)

	// PluginsUpdatedCh streams ptype's events from now on. The channel is
	// closed only when ctx is done or the registry shuts down.
	PluginsUpdatedCh(ctx context.Context, ptype string) <-chan *api.Event
	// Watch streams the events after fromIndex that pass filter, or a
	// reset first when they are no longer all in the journal.
	Watch(ctx context.Context, filter Filter, fromIndex uint64) (<-chan *api.Event, error)

	Shutdown()
}

// Config wires a Store. FSM must have been built with Journal as its sink.
type Config struct {
	FSM     *fsm.FSM
	Journal *Journal
	Applier Applier
	// Dispensers by plugin type; may be nil.
	Dispensers map[string]PluginDispenser
	// SubscriptionBuffer is each subscription channel's capacity; zero
	// means 64.
	SubscriptionBuffer int
}

func (c *Config) validate() error {
	if c.FSM == nil || c.Journal == nil || c.Applier == nil {
		return fmt.Errorf("registry: config needs FSM, Journal and Applier")
	}
	if c.SubscriptionBuffer < 0 {
		return fmt.Errorf("registry: SubscriptionBuffer %d is negative", c.SubscriptionBuffer)
	}
	return nil
}

// Store is a Registry over an FSM, an Applier and a Journal.
type Store struct {
	fsm     *fsm.FSM
	journal *Journal
	applier Applier
	buffer  int

	mu         sync.RWMutex // guards dispensers, stubs, shutdown; never held while calling out
	dispensers map[string]PluginDispenser
	stubs      map[string]PluginDispenser
	shutdown   bool

	subs sync.WaitGroup // one per subscription goroutine
}

var _ Registry = (*Store)(nil)

// New returns a Store.
func New(cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{
		fsm:        cfg.FSM,
		journal:    cfg.Journal,
		applier:    cfg.Applier,
		buffer:     cfg.SubscriptionBuffer,
		dispensers: make(map[string]PluginDispenser),
		stubs:      make(map[string]PluginDispenser),
	}
	if s.buffer == 0 {
		s.buffer = 64
	}
	for t, d := range cfg.Dispensers {
		s.dispensers[t] = d
	}
	return s, nil
}

// NewLocal returns a single-process registry: its own FSM, journal of
// journalSize events, and a LocalApplier.
func NewLocal(journalSize int, dispensers map[string]PluginDispenser) *Store {
	j := NewJournal(journalSize)
	f := fsm.New(j)
	s, _ := New(Config{FSM: f, Journal: j, Applier: NewLocalApplier(f), Dispensers: dispensers})
	return s
}

// FSM returns the state machine the Store reads.
func (s *Store) FSM() *fsm.FSM { return s.fsm }

// Journal returns the Store's event journal.
func (s *Store) Journal() *Journal { return s.journal }

func (s *Store) RegisterPlugin(ctx context.Context, info *api.PluginInfo) (api.WriteResult, error) {
	if info == nil {
		return api.WriteResult{}, fmt.Errorf("register: %w: plugin is missing", api.ErrInvalid)
	}
	res, err := s.write(ctx, &fsm.RegisterRequest{Plugin: info, RequestID: RequestID(ctx)})
	if err != nil {
		return res, fmt.Errorf("register %s/%s/%s: %w", info.Type, info.Name, info.AllocID, err)
	}
	return res, nil
}

func (s *Store) DeregisterPlugin(ctx context.Context, ptype, name, allocID string) (api.WriteResult, error) {
	res, err := s.write(ctx, &fsm.DeregisterRequest{Type: ptype, Name: name, AllocID: allocID, RequestID: RequestID(ctx)})
	if err != nil {
		return res, fmt.Errorf("deregister %s/%s/%s: %w", ptype, name, allocID, err)
	}
	return res, nil
}

// Deregister removes one instance, conditionally when req carries a
// condition (see api.DeregisterRequest): a refused condition is an error
// wrapping api.ErrConflict, and nothing changed.
func (s *Store) Deregister(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error) {
	if !req.Conditional() {
		return s.DeregisterPlugin(ctx, req.Type, req.Name, req.AllocID)
	}
	res, err := s.write(ctx, &fsm.ConditionalDeregisterRequest{
		Type: req.Type, Name: req.Name, AllocID: req.AllocID,
		IfNodeID: req.IfNodeID, IfModifyIndex: req.IfModifyIndex, RequestID: RequestID(ctx),
	})
	if err != nil {
		return res, fmt.Errorf("deregister %s/%s/%s: %w", req.Type, req.Name, req.AllocID, err)
	}
	return res, nil
}

func (s *Store) DeregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error) {
	res, err := s.write(ctx, &fsm.DeregisterNodeRequest{NodeID: nodeID, RequestID: RequestID(ctx)})
	if err != nil {
		return res, fmt.Errorf("deregister node %s: %w", nodeID, err)
	}
	return res, nil
}

// write validates and encodes req (a bad request never reaches the log),
// proposes it, and waits until this node has applied its index.
func (s *Store) write(ctx context.Context, req fsm.Request) (api.WriteResult, error) {
	if s.isShutdown() {
		return api.WriteResult{}, ErrShutdown
	}
	cmd, err := fsm.EncodeCommand(req)
	if err != nil {
		return api.WriteResult{}, err
	}
	res, err := s.applier.Apply(ctx, cmd)
	if err != nil {
		return api.WriteResult{}, err
	}
	if res.Err != nil {
		return api.WriteResult{Index: res.Index}, res.Err
	}
	if _, err := s.journal.WaitForIndex(ctx, res.Index); err != nil {
		return api.WriteResult{Index: res.Index}, fmt.Errorf("wait for local apply of %d: %w", res.Index, err)
	}
	return api.WriteResult{Index: res.Index, Result: res.Result}, nil
}

func (s *Store) Types() ([]string, uint64) {
	st := s.fsm.State()
	return st.Types(), st.Index()
}

func (s *Store) ListPlugins(ptype string) ([]*api.PluginInfo, uint64) {
	st := s.fsm.State()
	return copies(st.List(ptype)), st.Index()
}

func (s *Store) Instances(ptype, name string) ([]*api.PluginInfo, uint64) {
	st := s.fsm.State()
	return copies(st.Instances(ptype, name)), st.Index()
}

func (s *Store) PluginForAlloc(ptype, name, allocID string) (*api.PluginInfo, uint64, error) {
	st := s.fsm.State()
	p := st.Instance(ptype, name, allocID)
	if p == nil {
		return nil, st.Index(), fmt.Errorf("plugin %s/%s/%s: %w", ptype, name, allocID, api.ErrNotFound)
	}
	return p.Copy(), st.Index(), nil
}

func copies(in []*api.PluginInfo) []*api.PluginInfo {
	out := make([]*api.PluginInfo, len(in))
	for i, p := range in {
		out[i] = p.Copy()
	}
	return out
}

// DispensePlugin calls the type's dispenser (a stub set by
// StubDispenserForType wins) with a copy of the newest instance, outside
// every lock: a slow dispenser delays only its caller.
func (s *Store) DispensePlugin(ptype, name string) (interface{}, error) {
	s.mu.RLock()
	d, ok := s.stubs[ptype]
	if !ok {
		d, ok = s.dispensers[ptype]
	}
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("dispense %s/%s: %w", ptype, name, ErrNoDispenser)
	}
	p := s.fsm.State().Newest(ptype, name)
	if p == nil {
		return nil, fmt.Errorf("dispense %s/%s: %w", ptype, name, api.ErrNotFound)
	}
	v, err := d(p.Copy())
	if err != nil {
		return nil, fmt.Errorf("dispense %s/%s/%s: %w", ptype, name, p.AllocID, err)
	}
	return v, nil
}

// StubDispenserForType overrides the dispenser of ptype (for tests).
func (s *Store) StubDispenserForType(ptype string, d PluginDispenser) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stubs[ptype] = d
}

func (s *Store) PluginsUpdatedCh(ctx context.Context, ptype string) <-chan *api.Event {
	ch, err := s.Watch(ctx, Filter{Types: []string{ptype}}, s.journal.State().Index())
	if err != nil {
		closed := make(chan *api.Event)
		close(closed)
		return closed
	}
	return ch
}

func (s *Store) Watch(ctx context.Context, filter Filter, fromIndex uint64) (<-chan *api.Event, error) {
	return s.WatchWithHeartbeat(ctx, filter, fromIndex, 0)
}

// WatchWithHeartbeat is Watch with an EventHeartbeat, carrying the
// subscription's position, whenever nothing was sent for every (zero: no
// heartbeats).
func (s *Store) WatchWithHeartbeat(ctx context.Context, filter Filter, fromIndex uint64, every time.Duration) (<-chan *api.Event, error) {
	return s.watch(ctx, &subscription{filter: filter, cursor: fromIndex, heartbeat: every})
}

// WatchFromState is WatchWithHeartbeat for a consumer whose position this
// node's history does not hold (a cluster restored from a backup is behind
// it): the stream begins with a reset of the state as it is now, then the
// events after it.
func (s *Store) WatchFromState(ctx context.Context, filter Filter, every time.Duration) (<-chan *api.Event, error) {
	return s.watch(ctx, &subscription{filter: filter, heartbeat: every, fromState: true})
}

func (s *Store) watch(ctx context.Context, sub *subscription) (<-chan *api.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.shutdown {
		return nil, ErrShutdown
	}
	sub.j, sub.out, sub.lastSent = s.journal, make(chan *api.Event, s.buffer), time.Now()
	s.subs.Add(1) // under mu: Shutdown cannot be waiting yet
	go func() {
		defer s.subs.Done()
		sub.run(ctx)
	}()
	return sub.out, nil
}

// Shutdown closes every subscription channel and waits for their
// goroutines. Idempotent; safe from any goroutine.
func (s *Store) Shutdown() {
	s.mu.Lock()
	s.shutdown = true
	s.mu.Unlock()
	s.journal.Close()
	s.subs.Wait()
}

func (s *Store) isShutdown() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.shutdown
}

// WithRequestID returns a context that makes the write it is passed to
// carry id, so that a retry of the same write is recognised (api.WithRequestID).
func WithRequestID(ctx context.Context, id string) context.Context {
	return api.WithRequestID(ctx, id)
}

// RequestID returns the request ID set by WithRequestID, or "".
func RequestID(ctx context.Context) string { return api.RequestID(ctx) }
