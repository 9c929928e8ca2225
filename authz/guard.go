package authz

import (
	"context"
	"io"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
)

// Guard returns b with every call checked against the identity in its
// context (From): what the HTTP API and the agent RPC serve. Every method
// is written out (no embedding), so a method added to backend.Backend does
// not compile here until its rule is written.
func Guard(b backend.Backend) backend.Backend { return guard{b} }

type guard struct{ b backend.Backend }

var _ backend.Backend = guard{}

// Open: what an agent is and whether it is up (load balancers ask).
func (g guard) NodeID() string     { return g.b.NodeID() }
func (g guard) Role() string       { return g.b.Role() }
func (g guard) Leader() string     { return g.b.Leader() }
func (g guard) Health() api.Health { return g.b.Health() }

func (g guard) Register(ctx context.Context, p *api.PluginInfo) (api.WriteResult, error) {
	ctx, err := Register(ctx, p)
	if err != nil {
		return api.WriteResult{}, err
	}
	return g.b.Register(ctx, p)
}

func (g guard) Deregister(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error) {
	req, err := Deregister(ctx, req)
	if err != nil {
		return api.WriteResult{}, err
	}
	return g.b.Deregister(ctx, req)
}

func (g guard) SyncHost(ctx context.Context, req api.HostSyncRequest) (api.HostSyncResult, error) {
	ctx, err := SyncHost(ctx, req)
	if err != nil {
		return api.HostSyncResult{}, err
	}
	return g.b.SyncHost(ctx, req)
}

func (g guard) DeregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error) {
	if err := DeregisterNode(ctx, nodeID); err != nil {
		return api.WriteResult{}, err
	}
	return g.b.DeregisterNode(ctx, nodeID)
}

func (g guard) Renew(ctx context.Context, req api.RenewRequest) (api.RenewResult, error) {
	req, err := Renew(ctx, req)
	if err != nil {
		return api.RenewResult{}, err
	}
	return g.b.Renew(ctx, req)
}

// Query refuses a read of one type the caller may not read; listings of
// types and of a node's plugins are cut to what it may.
func (g guard) Query(ctx context.Context, q api.Query) (*api.QueryResult, error) {
	a := From(ctx).Grants
	if err := ReadQuery(ctx, q); err != nil {
		return nil, err
	}
	res, err := g.b.Query(ctx, q)
	if res == nil || a.CanReadAll() {
		return res, err
	}
	cut := *res // the backend's result may be shared: never modify it
	switch q.Kind {
	case api.QueryTypes:
		cut.Types = nil
		for _, t := range res.Types {
			if a.CanRead(t) {
				cut.Types = append(cut.Types, t)
			}
		}
	case api.QueryNode:
		cut.Plugins = filterPlugins(a, res.Plugins)
	}
	return &cut, err
}

// Subscribe refuses a type filter naming a type the caller may not read;
// without a filter, a caller that may not read every type gets the events
// of those it may.
func (g guard) Subscribe(ctx context.Context, types []string, from *uint64, heartbeat time.Duration) (<-chan backend.Event, uint64, error) {
	a := From(ctx).Grants
	for _, t := range types {
		if err := Read(ctx, t); err != nil {
			return nil, 0, err
		}
	}
	ch, start, err := g.b.Subscribe(ctx, types, from, heartbeat)
	if err != nil || len(types) > 0 || a.CanReadAll() {
		return ch, start, err
	}
	return filterStream(ch, a), start, nil
}

// filterStream passes on what a may see of in. Its goroutine ends when in
// is closed, which the backend does when the subscription's context ends.
func filterStream(in <-chan backend.Event, a api.Authorizer) <-chan backend.Event {
	out := make(chan backend.Event, cap(in))
	go func() {
		defer close(out)
		for ev := range in {
			if ev, ok := filterEvent(a, ev); ok {
				out <- ev
			}
		}
	}()
	return out
}

func (g guard) Peers(ctx context.Context) ([]string, error) {
	if err := ReadCluster(ctx); err != nil {
		return nil, err
	}
	return g.b.Peers(ctx)
}

// Members answers nothing to a caller that may not see the cluster.
func (g guard) Members(ctx context.Context) []api.Member {
	if ReadCluster(ctx) != nil {
		return nil
	}
	return g.b.Members(ctx)
}

func (g guard) AutopilotHealth(ctx context.Context) (api.AutopilotHealth, error) {
	if err := ReadCluster(ctx); err != nil {
		return api.AutopilotHealth{}, err
	}
	return g.b.AutopilotHealth(ctx)
}

func (g guard) TransferLeadership(ctx context.Context) (string, error) {
	if err := Operator(ctx); err != nil {
		return "", err
	}
	return g.b.TransferLeadership(ctx)
}

func (g guard) RemovePeer(ctx context.Context, id string) error {
	if err := Operator(ctx); err != nil {
		return err
	}
	return g.b.RemovePeer(ctx, id)
}

func (g guard) ResumeReaping(ctx context.Context) (api.ReapStatus, error) {
	if err := Operator(ctx); err != nil {
		return api.ReapStatus{}, err
	}
	return g.b.ResumeReaping(ctx)
}

func (g guard) SnapshotSave(ctx context.Context, stale bool) (func(io.Writer) error, error) {
	if err := Operator(ctx); err != nil {
		return nil, err
	}
	return g.b.SnapshotSave(ctx, stale)
}

func (g guard) SnapshotRestore(ctx context.Context, archive []byte) (api.WriteResult, error) {
	if err := Operator(ctx); err != nil {
		return api.WriteResult{}, err
	}
	return g.b.SnapshotRestore(ctx, archive)
}

// ResolveToken is open: it answers only to a caller that holds the secret.
func (g guard) ResolveToken(ctx context.Context, secret string) (*api.ACLToken, error) {
	return g.b.ResolveToken(ctx, secret)
}

// ACLBootstrap is open: it works once per cluster, for whoever comes first
// (Consul's bootstrap; docs/security.md says to run it at once).
func (g guard) ACLBootstrap(ctx context.Context) (api.ACLTokenSecret, error) {
	return g.b.ACLBootstrap(ctx)
}

func (g guard) ACLTokenCreate(ctx context.Context, req api.ACLTokenCreateRequest) (api.ACLTokenSecret, error) {
	if err := Operator(ctx); err != nil {
		return api.ACLTokenSecret{}, err
	}
	if err := req.Validate(); err != nil {
		return api.ACLTokenSecret{}, err
	}
	return g.b.ACLTokenCreate(ctx, req)
}

func (g guard) ACLTokens(ctx context.Context) ([]api.ACLToken, error) {
	if err := Operator(ctx); err != nil {
		return nil, err
	}
	return g.b.ACLTokens(ctx)
}

func (g guard) ACLTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error) {
	if err := Operator(ctx); err != nil {
		return api.WriteResult{}, err
	}
	if err := api.ValidateIdentifier("accessor", accessorID); err != nil {
		return api.WriteResult{}, err
	}
	return g.b.ACLTokenDelete(ctx, accessorID)
}
