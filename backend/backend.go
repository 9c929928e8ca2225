// Package backend is the one contract an agent serves, whatever its role:
// a server answers from its replica and the Raft log (cluster.Backend), a
// client agent through a server (agent.Client). The HTTP API and the
// agent RPC both call it, behind authz.Guard, so a request means the same
// thing whichever edge it came in by.
//
// It holds too the events a Backend delivers (Event): an event on its way
// from a node's hub (the registry's journal on a server, the fan-out's
// feed on a client agent) to the node's own subscribers, with the
// encodings that every subscriber of the node receiving it shares, so an
// event sent to a thousand HTTP streams is encoded once per encoding, not
// a thousand times. None of it crosses a wire: api.Event is the wire
// type, and holds nothing of a node's.
package backend

import (
	"context"
	"io"
	"time"

	"github.com/plugreg/plugreg/api"
)

// Backend is what an agent serves, in api's terms. Errors are api
// refusals (ErrInvalid, ErrNotFound, ErrConflict, ...) or api.Coded.
// Callers are authorized before they reach it (authz.Guard): a Backend
// itself checks no identity.
type Backend interface {
	NodeID() string
	Role() string

	// Writes carry their request ID, if any, in ctx (api.WithRequestID).
	// A registration carries in ctx the node the instance it replaces
	// must belong to, if any (WithIfNodeID: a node-bound caller's,
	// set by authz.Guard); a server makes it a condition of the entry.
	Register(ctx context.Context, p *api.PluginInfo) (api.WriteResult, error)
	Deregister(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error)
	DeregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error)
	// SyncHost makes a host's anti-entropy writes (its registrations and
	// removals) as one log entry where every server knows how, one write
	// each otherwise; the writes their conditions refuse are reported in
	// the result, not as an error. A node-bound caller's registrations
	// are conditional as its single ones are (WithIfNodeID). A client
	// agent whose servers do not all serve it answers api.ErrUnsupported
	// and sends nothing.
	SyncHost(ctx context.Context, req api.HostSyncRequest) (api.HostSyncResult, error)
	// Renew renews the lease of a leased instance on the leader (never a
	// log entry): api.ErrNotFound when there is no such lease.
	Renew(ctx context.Context, req api.RenewRequest) (api.RenewResult, error)

	Query(ctx context.Context, q api.Query) (*api.QueryResult, error)
	// Subscribe streams events after *from (nil: from now) and returns the
	// position it starts at; see registry.Hub.WatchWithHeartbeat. The
	// events (and their records) may be shared with other subscribers:
	// read them, never modify them.
	Subscribe(ctx context.Context, types []string, from *uint64, heartbeat time.Duration) (<-chan Event, uint64, error)

	Leader() string
	Peers(ctx context.Context) ([]string, error)
	Members(ctx context.Context) []api.Member
	Health() api.Health
	AutopilotHealth(ctx context.Context) (api.AutopilotHealth, error)
	TransferLeadership(ctx context.Context) (string, error)
	RemovePeer(ctx context.Context, id string) error
	// ResumeReaping lets the leader reap failed nodes while its guard
	// would hold them (cluster.ReapBrakes), until the guard releases;
	// it answers the guard's state. Only the leader has a guard.
	ResumeReaping(ctx context.Context) (api.ReapStatus, error)

	// SnapshotSave takes a snapshot (a refusal is the error); write
	// writes its archive (package snapshot).
	SnapshotSave(ctx context.Context, stale bool) (write func(io.Writer) error, err error)
	SnapshotRestore(ctx context.Context, archive []byte) (api.WriteResult, error)

	// ResolveToken returns the token whose secret is secret, or an error
	// wrapping api.ErrACLNotFound. It never puts secret in an error.
	ResolveToken(ctx context.Context, secret string) (*api.ACLToken, error)
	ACLBootstrap(ctx context.Context) (api.ACLTokenSecret, error)
	ACLTokenCreate(ctx context.Context, req api.ACLTokenCreateRequest) (api.ACLTokenSecret, error)
	ACLTokens(ctx context.Context) ([]api.ACLToken, error)
	ACLTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error)
}

type ifNodeIDKey struct{}

// WithIfNodeID returns a context that makes the registration it is passed
// to conditional: applied only if no instance has its key or the existing
// one belongs to node. It is in the context, as the request ID is, rather
// than in Register's arguments: authz.Guard derives it from the caller's
// identity on the server that applies the write; no caller sends it (a
// client agent forwards the token, from which the server derives it
// again).
func WithIfNodeID(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, ifNodeIDKey{}, node)
}

// IfNodeID returns the node set by WithIfNodeID, or "".
func IfNodeID(ctx context.Context) string {
	n, _ := ctx.Value(ifNodeIDKey{}).(string)
	return n
}
