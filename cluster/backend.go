package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/tracing"
)

// Backend is a server's side of the HTTP API and of the internal RPC that
// client agents use: every call in api's terms. It is what
// (*Server).Backend returns; the HTTP server and the RPC handler use it, so
// a request means the same through either.
type Backend struct{ s *Server }

// Backend returns the server's API backend.
func (s *Server) Backend() *Backend { return &Backend{s: s} }

// EventTraces is what the event streams need to trace the delivery of a
// traced write's events (nil with tracing off).
func (b *Backend) EventTraces() *tracing.Published {
	if b.s.traced == nil {
		return nil
	}
	return b.s.traced.published
}

// NodeID is the server's node ID.
func (b *Backend) NodeID() string { return b.s.cfg.NodeID }

// Role is api.RoleServer.
func (b *Backend) Role() string { return api.RoleServer }

// Register registers or updates p (the request ID, if any, is in ctx).
func (b *Backend) Register(ctx context.Context, p *api.PluginInfo) (api.WriteResult, error) {
	res, err := b.s.register(ctx, p)
	return res, apiError(err)
}

// Deregister removes an instance, conditionally when req says so.
func (b *Backend) Deregister(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error) {
	res, err := b.s.deregister(ctx, req)
	return res, apiError(err)
}

// DeregisterNode removes every instance of a node.
func (b *Backend) DeregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error) {
	res, err := b.s.deregisterNode(ctx, nodeID)
	return res, apiError(err)
}

// Renew renews a lease on the leader (forwarded there from a follower).
func (b *Backend) Renew(ctx context.Context, req api.RenewRequest) (api.RenewResult, error) {
	res, err := b.s.Renew(ctx, req)
	return res, apiError(err)
}

// Query answers a read: it blocks while asked to and nothing of the
// queried types changed, then reads at the requested consistency.
func (b *Backend) Query(ctx context.Context, q api.Query) (*api.QueryResult, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if q.MinIndex > 0 && q.Wait > 0 {
		var types []string
		if q.Kind != api.QueryTypes && q.Kind != api.QueryNode {
			types = []string{q.Type}
		}
		b.block(ctx, types, q.MinIndex, q.Wait)
	}
	st, meta, err := b.s.Read(ctx, q.Consistency)
	out := &api.QueryResult{KnownLeader: meta.KnownLeader, LastContact: meta.LastContact}
	if err != nil {
		return out, apiError(err)
	}
	out.Index = st.Index()
	switch q.Kind {
	case api.QueryTypes:
		out.Types = st.Types()
	case api.QueryList:
		out.Plugins = st.List(q.Type)
	case api.QueryInstances:
		out.Plugins = st.Instances(q.Type, q.Name)
		if len(out.Plugins) == 0 {
			return out, fmt.Errorf("plugin %s/%s: %w", q.Type, q.Name, api.ErrNotFound)
		}
	case api.QueryInstance:
		p := st.Instance(q.Type, q.Name, q.AllocID)
		if p == nil {
			return out, fmt.Errorf("plugin %s/%s/%s: %w", q.Type, q.Name, q.AllocID, api.ErrNotFound)
		}
		out.Plugins = []*api.PluginInfo{p}
	case api.QueryNode:
		out.Plugins = st.NodeInstances(q.NodeID)
	case api.QueryTypeInstances:
		out.Plugins = st.TypeInstances(q.Type)
	}
	// The instances are the state's own: they are only encoded, never
	// changed.
	return out, nil
}

// block waits until an event of types (all types when empty) with an index
// past index has been applied here, or wait has passed.
func (b *Backend) block(ctx context.Context, types []string, index uint64, wait time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	stop := context.AfterFunc(b.s.ctx, cancel) // Shutdown ends the wait
	defer stop()
	ch, err := b.s.hub.Watch(ctx, registry.Filter{Types: types}, index)
	if err != nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// Subscribe streams the events of types (none: all) after *from (nil: from
// this server's applied index), with a heartbeat every heartbeat (zero:
// none). It returns the position the stream starts at.
func (b *Backend) Subscribe(ctx context.Context, types []string, from *uint64, heartbeat time.Duration) (<-chan backend.Event, uint64, error) {
	// A client agent chooses its stream's heartbeat: 1 ns was a busy
	// loop on the server.
	if heartbeat != 0 && heartbeat < agentrpc.MinHeartbeat {
		return nil, 0, fmt.Errorf("%w: heartbeat %v: at least %v (or 0 for none)", api.ErrInvalid, heartbeat, agentrpc.MinHeartbeat)
	}
	for _, t := range types {
		if err := api.ValidateIdentifier("type", t); err != nil {
			return nil, 0, err
		}
	}
	// Delivered, shared: every consumer of Subscribe (the HTTP stream,
	// the plugin socket, client agents' upstreams) only encodes what it
	// gets.
	filter := registry.Filter{Types: types}
	start := b.s.AppliedIndex()
	if from != nil {
		start = *from
	}
	if start > b.s.AppliedIndex() {
		ahead, at, err := b.aheadOfCluster(ctx, start)
		if err != nil {
			return nil, 0, apiError(err)
		}
		if ahead {
			// The consumer saw a history the cluster no longer has (a
			// restore from backup, or a new cluster at the same
			// address): without this, the events up to its position
			// were skipped in silence.
			b.s.logger.Info("an event stream resumes past the cluster's committed index: it starts with a reset", "from", start, "committed", at)
			ch, err := b.s.hub.DeliverFromState(ctx, filter, heartbeat)
			if err != nil {
				return nil, 0, apiError(err)
			}
			return ch, b.s.AppliedIndex(), nil
		}
	}
	ch, err := b.s.hub.Deliver(ctx, filter, start, heartbeat)
	if err != nil {
		return nil, 0, apiError(err)
	}
	return ch, start, nil
}

// aheadOfCluster reports whether index is past the cluster's committed
// index (the leader's, through a read barrier), or only past this server's
// applied index: a follower that lags serves the stream from index as
// asked, as it catches up. (No wait for the apply here: the last committed
// entries may be Raft's own, which the FSM never sees.)
func (b *Backend) aheadOfCluster(ctx context.Context, index uint64) (bool, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.s.cfg.ApplyTimeout)
	defer cancel()
	committed, err := b.s.ReadIndex(ctx)
	if err != nil {
		return false, 0, err
	}
	return index > committed, committed, nil
}

// Leader is the leader's server address, "" when none is known.
func (b *Backend) Leader() string { return b.s.Leader() }

// Peers are the server addresses in the Raft configuration.
func (b *Backend) Peers(context.Context) ([]string, error) { return b.s.Peers() }

// Members is the gossip pool, servers and client agents, as this server
// sees it.
func (b *Backend) Members(context.Context) []api.Member {
	voters := map[string]bool{}
	if servers, err := b.s.RaftConfiguration(); err == nil {
		for _, srv := range servers {
			voters[string(srv.ID)] = srv.Suffrage == raft.Voter
		}
	}
	leader := b.s.LeaderID()
	out := []api.Member{}
	for _, m := range b.s.Members() {
		out = append(out, m.API(leader, voters[m.Meta.ID]))
	}
	return out
}

// catchingUp is how many committed entries a server may still have to
// apply and be ready.
const catchingUp = 1000

// Stats are hashicorp/raft's figures (for /v1/agent/self).
func (b *Backend) Stats() map[string]string { return b.s.Stats() }

// Health is the server's view of itself and the cluster.
func (b *Backend) Health() api.Health {
	s := b.s
	h := api.Health{Status: "ok", Node: s.NodeID(), Role: api.RoleServer, Leader: s.Leader(), AppliedIndex: s.AppliedIndex()}
	stats := s.Stats()
	h.RaftState = stats["state"]
	h.Term, _ = strconv.ParseUint(stats["term"], 10, 64)
	h.CommitIndex, _ = strconv.ParseUint(stats["commit_index"], 10, 64)
	h.LastSnapshotIndex, _ = strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	switch {
	case h.Leader == "":
		h.Status = "no_leader"
	case h.CommitIndex > h.AppliedIndex+catchingUp:
		// Restarted or back from a partition, still applying what the
		// leader has already committed: its reads would lag.
		h.Status = "catching_up"
	}
	return h
}

// TransferLeadership hands leadership to another voter and returns the
// new leader's address as far as it is known.
func (b *Backend) TransferLeadership(ctx context.Context) (string, error) {
	if err := b.s.TransferLeadership(); err != nil {
		return "", err
	}
	return b.s.Leader(), nil
}

// RemovePeer removes a server from the Raft configuration.
func (b *Backend) RemovePeer(ctx context.Context, id string) error {
	if err := api.ValidateIdentifier("id", id); err != nil {
		return err
	}
	return b.s.RemovePeer(id)
}

// ResumeReaping lets the leader reap failed nodes while its guard would
// hold them, until the guard releases (Server.ResumeReaping).
func (b *Backend) ResumeReaping(ctx context.Context) (api.ReapStatus, error) {
	return b.s.ResumeReaping()
}

// apiError gives the errors of this side of the system their api code, so
// the HTTP API and the RPC answer them alike.
func apiError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, registry.ErrShutdown), errors.Is(err, ErrShutdown):
		return unknown(api.CodeShutdown, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		var coded api.Coded
		if !errors.As(err, &coded) {
			return unknown(api.CodeTimeout, err)
		}
	}
	return err
}
