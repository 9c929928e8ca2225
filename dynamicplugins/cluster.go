package dynamicplugins

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
)

// DefaultTimeout bounds each call of a Registry from NewRegistry unless
// Config.Timeout says otherwise.
const DefaultTimeout = 30 * time.Second

// Config tunes NewRegistry.
type Config struct {
	// NodeID is the node the instances registered through this registry
	// run on (plugreg's PluginInfo.NodeID: reaping and node queries go by
	// it). Empty: none, as in the seed.
	NodeID string
	// Timeout bounds each call, failover and retries included (zero:
	// DefaultTimeout): the seed's methods take no context.
	Timeout time.Duration
	// Dispensers vend clients by plugin type, as the seed's NewRegistry
	// takes them.
	Dispensers map[string]PluginDispenser
}

// clusterRegistry is a Registry backed by a plugreg cluster.
type clusterRegistry struct {
	c          *client.Client
	nodeID     string
	timeout    time.Duration
	dispensers map[string]PluginDispenser

	ctx    context.Context // ended by Shutdown: every call and subscription
	cancel context.CancelFunc
	subs   sync.WaitGroup // one per PluginsUpdatedCh goroutine

	resets atomic.Int64 // resets delivered as changes (for tests)

	mu    sync.RWMutex // guards stubs and shut; never held while calling out
	stubs map[string]PluginDispenser
	shut  bool
}

// NewRegistry returns the seed's Registry over the cluster c talks to.
func NewRegistry(c *client.Client, cfg Config) Registry {
	ctx, cancel := context.WithCancel(context.Background())
	r := &clusterRegistry{
		c: c, nodeID: cfg.NodeID, timeout: cfg.Timeout,
		dispensers: make(map[string]PluginDispenser, len(cfg.Dispensers)),
		ctx:        ctx, cancel: cancel,
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	for t, d := range cfg.Dispensers {
		r.dispensers[t] = d
	}
	return r
}

// call returns the context of one call: bounded by the timeout, ended by
// Shutdown.
func (r *clusterRegistry) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ctx, r.timeout)
}

// RegisterPlugin registers info, or changes its registration, on the
// cluster; it returns once a quorum has it. The seed's checks come first,
// with its words; plugreg's own validation (identifiers, sizes) answers
// after them, as an error matching api.ErrInvalid.
func (r *clusterRegistry) RegisterPlugin(info *PluginInfo) error {
	switch {
	case info.Type == "":
		return errors.New("Plugin.Type must not be empty")
	case info.ConnectionInfo == nil:
		return errors.New("Plugin.ConnectionInfo must not be nil")
	case info.Name == "":
		return errors.New("Plugin.Name must not be empty")
	}
	ctx, cancel := r.call()
	defer cancel()
	if _, err := r.c.Register(ctx, toAPI(info, r.nodeID)); err != nil {
		return fmt.Errorf("register %s/%s/%s: %w", info.Type, info.Name, info.AllocID, err)
	}
	return nil
}

// DeregisterPlugin removes an instance. An instance that is not registered
// is not an error (the seed errs only when it has never seen the type,
// which a cluster cannot tell from "all deregistered").
func (r *clusterRegistry) DeregisterPlugin(ptype, name, allocID string) error {
	switch {
	case ptype == "":
		return errors.New("must specify plugin type to deregister")
	case name == "":
		return errors.New("must specify plugin name to deregister")
	case allocID == "":
		return errors.New("must specify plugin allocation ID to deregister")
	}
	ctx, cancel := r.call()
	defer cancel()
	if _, err := r.c.Deregister(ctx, ptype, name, allocID); err != nil {
		return fmt.Errorf("deregister %s/%s/%s: %w", ptype, name, allocID, err)
	}
	return nil
}

// ListPlugins returns the newest instance of every name of ptype, read
// linearizably. The seed's signature has no error: a cluster that cannot
// answer within the timeout gets nil, as for a type never registered.
func (r *clusterRegistry) ListPlugins(ptype string) []*PluginInfo {
	ctx, cancel := r.call()
	defer cancel()
	list, _, err := r.c.List(ctx, ptype, nil)
	if err != nil || len(list) == 0 {
		return nil
	}
	out := make([]*PluginInfo, len(list))
	for i, p := range list {
		out[i] = fromAPI(p)
	}
	return out
}

// PluginForAlloc returns the instance of (ptype, name) run by allocID.
// Its error matches api.ErrNotFound when there is none.
func (r *clusterRegistry) PluginForAlloc(ptype, name, allocID string) (*PluginInfo, error) {
	ctx, cancel := r.call()
	defer cancel()
	p, _, err := r.c.Get(ctx, ptype, name, allocID, nil)
	if err != nil {
		if errors.Is(err, api.ErrNotFound) {
			return nil, fmt.Errorf("no plugin for that allocation: %w", err)
		}
		return nil, fmt.Errorf("plugin %s/%s/%s: %w", ptype, name, allocID, err)
	}
	return fromAPI(p), nil
}

// DispensePlugin vends a client for the newest instance of (ptype, name)
// through the type's dispenser (a stub from StubDispenserForType wins),
// called outside every lock. When the newest instance is deregistered, the
// next call vends the one registered before it.
func (r *clusterRegistry) DispensePlugin(ptype, name string) (interface{}, error) {
	switch {
	case ptype == "":
		return nil, errors.New("must specify plugin type to dispense")
	case name == "":
		return nil, errors.New("must specify plugin name to dispense")
	}
	dispense, ok := r.dispensers[ptype]
	if !ok {
		return nil, fmt.Errorf("no plugin dispenser found for type: %s", ptype)
	}
	r.mu.RLock()
	if stub, ok := r.stubs[ptype]; ok {
		dispense = stub
	}
	r.mu.RUnlock()
	ctx, cancel := r.call()
	defer cancel()
	list, _, err := r.c.Instances(ctx, ptype, name, nil)
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		return nil, fmt.Errorf("dispense %s/%s: %w", ptype, name, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("plugin %s for type %s not found", name, ptype)
	}
	return dispense(fromAPI(list[0]))
}

// StubDispenserForType replaces the dispenser of ptype (nil removes the
// stub), for tests of the programs that use the registry.
func (r *clusterRegistry) StubDispenserForType(ptype string, dispenser PluginDispenser) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if dispenser == nil {
		delete(r.stubs, ptype)
		return
	}
	if r.stubs == nil {
		r.stubs = make(map[string]PluginDispenser, 1)
	}
	r.stubs[ptype] = dispenser
}

// Shutdown ends every call in flight and closes every channel that
// PluginsUpdatedCh returned, and waits for their goroutines. Idempotent.
func (r *clusterRegistry) Shutdown() {
	r.mu.Lock()
	r.shut = true
	r.mu.Unlock()
	r.cancel()
	r.subs.Wait()
}

func toAPI(p *PluginInfo, nodeID string) *api.PluginInfo {
	out := &api.PluginInfo{
		Type: p.Type, Name: p.Name, AllocID: p.AllocID, Version: p.Version,
		NodeID: nodeID, Options: p.Options,
	}
	if p.ConnectionInfo != nil {
		out.ConnectionInfo = &api.ConnectionInfo{SocketPath: p.ConnectionInfo.SocketPath}
	}
	return out
}

// fromAPI is p as the seed knows it: a copy of its own, which the caller
// may change.
func fromAPI(p *api.PluginInfo) *PluginInfo {
	p = p.Copy()
	out := &PluginInfo{Name: p.Name, Type: p.Type, Version: p.Version, AllocID: p.AllocID, Options: p.Options}
	if p.ConnectionInfo != nil {
		out.ConnectionInfo = &PluginConnectionInfo{SocketPath: p.ConnectionInfo.SocketPath}
	}
	return out
}
