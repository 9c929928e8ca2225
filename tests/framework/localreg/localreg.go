// Package localreg is a registry of one process, for tests: an FSM to which
// it applies each write itself, as a single-node log would, with its own
// watch hub. The agent's parts (the plugin watcher, the fan-out) and the
// kubelet compat tests run against it as the real registry code behind
// them, without Raft. The product's own registries are a server's
// (package cluster) and the network one of package dynamicplugins.
package localreg

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/registry"
)

// Local is a Registry of one process: an FSM to which it applies each
// write itself, with consecutive indexes, as a single-node log would, and
// a watch hub over the FSM's journal.
type Local struct {
	*registry.Hub // Watch, Deliver, ..., Shutdown

	fsm     *fsm.FSM
	applyMu sync.Mutex // serialises apply, as raft's FSM goroutine does
}

// New returns a registry of one process whose journal keeps journalSize
// events (zero: registry.DefaultJournalSize).
func New(journalSize int) *Local {
	j := registry.NewJournal(journalSize)
	hub, _ := registry.NewHub(j, 0) // cannot fail: a journal and the default buffer
	return &Local{Hub: hub, fsm: fsm.New(j)}
}

// FSM returns the state machine the registry applies to.
func (l *Local) FSM() *fsm.FSM { return l.fsm }

func (l *Local) RegisterPlugin(ctx context.Context, info *api.PluginInfo) (api.WriteResult, error) {
	if info == nil {
		return api.WriteResult{}, fmt.Errorf("register: %w: plugin is missing", api.ErrInvalid)
	}
	res, err := l.write(ctx, &fsm.RegisterRequest{Plugin: info, RequestID: api.RequestID(ctx)})
	if err != nil {
		return res, fmt.Errorf("register %s/%s/%s: %w", info.Type, info.Name, info.AllocID, err)
	}
	return res, nil
}

func (l *Local) DeregisterPlugin(ctx context.Context, ptype, name, allocID string) (api.WriteResult, error) {
	return l.Deregister(ctx, api.DeregisterRequest{Type: ptype, Name: name, AllocID: allocID})
}

// Deregister removes one instance, conditionally when req carries a
// condition (see api.DeregisterRequest): a refused condition is an error
// wrapping api.ErrConflict, and nothing changed.
func (l *Local) Deregister(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error) {
	res, err := l.write(ctx, fsm.NewDeregisterRequest(req, api.RequestID(ctx)))
	if err != nil {
		return res, fmt.Errorf("deregister %s/%s/%s: %w", req.Type, req.Name, req.AllocID, err)
	}
	return res, nil
}

func (l *Local) DeregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error) {
	res, err := l.write(ctx, &fsm.DeregisterNodeRequest{NodeID: nodeID, RequestID: api.RequestID(ctx)})
	if err != nil {
		return res, fmt.Errorf("deregister node %s: %w", nodeID, err)
	}
	return res, nil
}

// write validates and encodes req (a bad request never reaches the FSM)
// and applies it at the next index.
func (l *Local) write(ctx context.Context, req fsm.Request) (api.WriteResult, error) {
	if l.IsShutdown() {
		return api.WriteResult{}, registry.ErrShutdown
	}
	if err := ctx.Err(); err != nil {
		return api.WriteResult{}, fmt.Errorf("local apply: %w", err)
	}
	cmd, err := fsm.EncodeCommand(req)
	if err != nil {
		return api.WriteResult{}, err
	}
	l.applyMu.Lock()
	index := l.fsm.State().Index() + 1
	res, _ := l.fsm.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: cmd}).(*fsm.ApplyResult)
	l.applyMu.Unlock()
	switch {
	case res == nil:
		return api.WriteResult{}, fmt.Errorf("local apply at %d: no result", index)
	case res.Err != nil:
		return api.WriteResult{Index: res.Index}, res.Err
	}
	return api.WriteResult{Index: res.Index, Result: res.Result}, nil
}

func (l *Local) Types() ([]string, uint64) {
	st := l.fsm.State()
	return st.Types(), st.Index()
}

func (l *Local) ListPlugins(ptype string) ([]*api.PluginInfo, uint64) {
	st := l.fsm.State()
	return copies(st.List(ptype)), st.Index()
}

func (l *Local) Instances(ptype, name string) ([]*api.PluginInfo, uint64) {
	st := l.fsm.State()
	return copies(st.Instances(ptype, name)), st.Index()
}

func (l *Local) PluginForAlloc(ptype, name, allocID string) (*api.PluginInfo, uint64, error) {
	st := l.fsm.State()
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

// PluginsUpdatedCh streams ptype's events from now on; the channel is
// closed when ctx is done or the registry shuts down.
func (l *Local) PluginsUpdatedCh(ctx context.Context, ptype string) <-chan *api.Event {
	ch, err := l.Watch(ctx, registry.Filter{Types: []string{ptype}}, l.Journal().State().Index())
	if err != nil {
		closed := make(chan *api.Event)
		close(closed)
		return closed
	}
	return ch
}
