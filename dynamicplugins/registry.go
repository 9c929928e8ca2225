package dynamicplugins

import (
	"context"
	"errors"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/registry"
)

// ErrNoDispenser: no dispenser is registered for the plugin type.
var ErrNoDispenser = errors.New("dynamicplugins: no dispenser for plugin type")

// PluginDispenser turns an instance into a client for it (Nomad's
// dynamicplugins.PluginDispenser). It runs outside every registry lock.
type PluginDispenser func(info *api.PluginInfo) (interface{}, error)

// Registry is Nomad's dynamicplugins.Registry over plugreg's types. Reads
// are served from applied state and return the index they reflect; writes
// return once applied, so a read or watch afterwards sees them.
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
	Watch(ctx context.Context, filter registry.Filter, fromIndex uint64) (<-chan *api.Event, error)

	Shutdown()
}
