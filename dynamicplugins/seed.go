// Package dynamicplugins is Nomad's dynamicplugins API (the seed plugreg
// was designed from) backed by a plugreg cluster: the same types, the
// same Registry interface, method for method, so that a Go program written
// against Nomad's client/dynamicplugins runs unchanged against plugreg by
// changing its import path and its constructor. NewRegistry returns a
// Registry whose writes and reads go to the cluster through a
// client.Client (failing over between nodes, retrying writes safely with
// request IDs) and whose PluginsUpdatedCh resumes across node failures
// without a gap.
//
// Where a plugreg cluster differs from Nomad's in-process registry, the
// differences are written down on each method: the seed's signatures
// carry no context and no error for reads, so each call is bounded by
// Config.Timeout, and a read the cluster cannot answer in time returns
// what the seed returns for nothing registered.
package dynamicplugins

import "context"

// The plugin types Nomad's CSI support registers.
const (
	PluginTypeCSIController = "csi-controller"
	PluginTypeCSINode       = "csi-node"
)

// Registry is the seed's interface: dynamic registration of plugins and
// real-time updates of their events.
type Registry interface {
	RegisterPlugin(info *PluginInfo) error
	DeregisterPlugin(ptype, name, allocID string) error
	ListPlugins(ptype string) []*PluginInfo
	DispensePlugin(ptype, name string) (interface{}, error)
	PluginForAlloc(ptype, name, allocID string) (*PluginInfo, error)
	PluginsUpdatedCh(ctx context.Context, ptype string) <-chan *PluginUpdateEvent
	Shutdown()
	StubDispenserForType(ptype string, dispenser PluginDispenser)
}

// PluginDispenser vends a client for a plugin instance.
type PluginDispenser func(info *PluginInfo) (interface{}, error)

// PluginInfo is the metadata the registry stores for a plugin instance.
type PluginInfo struct {
	Name    string
	Type    string
	Version string
	// ConnectionInfo is the data required to connect to the plugin.
	ConnectionInfo *PluginConnectionInfo
	// AllocID tracks the allocation running the plugin.
	AllocID string
	// Options pass further metadata along to other subsystems.
	Options map[string]string
}

// PluginConnectionInfo is the data required to connect to the plugin: the
// path of its API socket.
type PluginConnectionInfo struct {
	SocketPath string
}

// EventType is the kind of a PluginUpdateEvent.
type EventType string

const (
	// EventTypeRegistered: a plugin instance was registered, or its
	// registration changed (plugreg's "updated", which the seed left for
	// later: hashicorp/nomad#11786).
	EventTypeRegistered EventType = "registered"
	// EventTypeDeregistered: a plugin instance was removed (deregistered,
	// or plugreg's "expired": its lease ran out).
	EventTypeDeregistered EventType = "deregistered"
)

// PluginUpdateEvent is sent over PluginsUpdatedCh when a plugin instance
// is added, changed or removed.
type PluginUpdateEvent struct {
	EventType EventType
	Info      *PluginInfo
}
