package pluginwatcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/plugreg/plugreg/api"
)

// Registrar is where the watcher's registrations go. The agent implements
// it over the cluster; tests implement it over localreg (tests/framework), a registry of one process.
//
// The watcher calls it from one goroutine per plugin name at a time, never
// twice at once for one (Type, Name), and always with a ctx that ends when
// the watcher stops.
type Registrar interface {
	// Register registers (or re-asserts; it is idempotent) one instance for
	// this host.
	Register(ctx context.Context, info *api.PluginInfo) error
	// Deregister removes the instance, only if it still belongs to this host.
	Deregister(ctx context.Context, info *api.PluginInfo) error
}

// Keys and values of the Options the watcher puts on every registration.
const (
	// (api.OptionSource marks who registered an instance: api.SourceKubelet
	// on instances registered by this package.)
	// OptionVersions holds the plugin's supported versions as GetInfo
	// reported them, comma-separated, in its order.
	OptionVersions = "versions"
	// OptionRegistrationSocket holds the path of the registration socket
	// the instance was found at (ConnectionInfo.SocketPath is its
	// endpoint, which may differ).
	OptionRegistrationSocket = "registration-socket"
)

// AllocID returns the AllocID of the instance found at the registration
// socket path on the node: "k-" and the first 16 hex digits of
// sha256(nodeID, 0, path). It depends on nothing else, so an agent that
// restarts re-asserts the same instances instead of adding new ones.
func AllocID(nodeID, socketPath string) string {
	sum := sha256.Sum256([]byte(nodeID + "\x00" + socketPath))
	return "k-" + hex.EncodeToString(sum[:])[:16]
}

// buildInfo builds the PluginInfo registered for a socket's GetInfo
// answer. endpoint is already defaulted to the socket path.
func buildInfo(nodeID, socketPath, typ, name, endpoint, version string, versions []string) *api.PluginInfo {
	return &api.PluginInfo{
		Type:           typ,
		Name:           name,
		AllocID:        AllocID(nodeID, socketPath),
		Version:        version,
		NodeID:         nodeID,
		ConnectionInfo: &api.ConnectionInfo{SocketPath: endpoint},
		Options: map[string]string{
			OptionVersions:           strings.Join(versions, ","),
			OptionRegistrationSocket: socketPath,
			api.OptionSource:         api.SourceKubelet,
		},
	}
}
