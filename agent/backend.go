package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/plugreg/plugreg/agent/fanout"
	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/transport"
)

// The Client is an httpapi.Backend: every request goes to a server over
// the internal RPC, with the request ID (if any) carried along.

// NodeID is the host's node ID.
func (c *Client) NodeID() string { return c.cfg.NodeID }

// Role is api.RoleClient.
func (c *Client) Role() string { return api.RoleClient }

// write sends a write to a server, bounded by RPCTimeout; what names it
// in the error.
func (c *Client) write(ctx context.Context, method string, args interface{}, what string) (api.WriteResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	var res api.WriteResult
	if err := c.callTraced(ctx, true, method, args, &res); err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	return res, nil
}

// Register registers or updates p through a server.
func (c *Client) Register(ctx context.Context, p *api.PluginInfo) (api.WriteResult, error) {
	if p == nil {
		return api.WriteResult{}, fmt.Errorf("register: %w: plugin is missing", api.ErrInvalid)
	}
	return c.write(ctx, agentrpc.Register, &agentrpc.RegisterArgs{Plugin: p, RequestID: api.RequestID(ctx), Token: c.writeToken(ctx)},
		fmt.Sprintf("register %s/%s/%s", p.Type, p.Name, p.AllocID))
}

// Deregister removes an instance through a server, conditionally when req
// says so.
func (c *Client) Deregister(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error) {
	if err := req.Validate(); err != nil {
		return api.WriteResult{}, err
	}
	return c.write(ctx, agentrpc.Deregister, &agentrpc.DeregisterArgs{Request: req, RequestID: api.RequestID(ctx), Token: c.writeToken(ctx)},
		fmt.Sprintf("deregister %s/%s/%s", req.Type, req.Name, req.AllocID))
}

// SyncHost sends a host's anti-entropy writes to a server as one call,
// which the server writes as one entry (see backend.Backend). While a
// server this agent sees alive does not serve it (a rolling upgrade), it
// sends nothing and answers api.ErrUnsupported: the host then writes one
// instance at a time, which every server serves.
func (c *Client) SyncHost(ctx context.Context, req api.HostSyncRequest) (api.HostSyncResult, error) {
	if err := req.Validate(); err != nil {
		return api.HostSyncResult{}, err
	}
	for _, m := range c.gossip.AliveServers() {
		if m.RPCVersion < agentrpc.HostSyncRPCVersion {
			return api.HostSyncResult{}, fmt.Errorf("host sync: %w: server %s does not serve it yet", api.ErrUnsupported, m.ID)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	var res api.HostSyncResult
	if err := c.callTraced(ctx, true, agentrpc.HostSync, &agentrpc.HostSyncArgs{Request: req, Token: c.writeToken(ctx)}, &res); err != nil {
		return res, fmt.Errorf("host sync of node %s (%d writes): %w", req.NodeID, req.Writes(), err)
	}
	return res, nil
}

// DeregisterNode removes every instance of a node through a server.
func (c *Client) DeregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error) {
	if err := api.ValidateIdentifier("node", nodeID); err != nil {
		return api.WriteResult{}, err
	}
	return c.write(ctx, agentrpc.DeregisterNode, &agentrpc.DeregisterNodeArgs{NodeID: nodeID, RequestID: api.RequestID(ctx), Token: c.writeToken(ctx)},
		"deregister node "+nodeID)
}

// Renew renews a lease through a server, which passes it to the leader.
// A renewal is safe to repeat: one a server did not serve is tried at the
// next (tryServers).
func (c *Client) Renew(ctx context.Context, req api.RenewRequest) (api.RenewResult, error) {
	if err := req.Validate(); err != nil {
		return api.RenewResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	var res api.RenewResult
	if err := c.call(ctx, agentrpc.Renew, &agentrpc.RenewArgs{Request: req, Token: c.writeToken(ctx)}, &res); err != nil {
		return res, fmt.Errorf("renew %s/%s/%s: %w", req.Type, req.Name, req.AllocID, err)
	}
	return res, nil
}

// Query reads through a server, with the consistency (and blocking) the
// query asks for: the server does what it would do for its own HTTP API.
func (c *Client) Query(ctx context.Context, q api.Query) (*api.QueryResult, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout+q.Wait)
	defer cancel()
	res := new(api.QueryResult)
	if err := c.call(ctx, agentrpc.Query, &q, res); err != nil {
		return nil, err
	}
	if res.NotFound != "" {
		// The server's not-found, with the index of the state it read
		// (the fault suite caught an index 0 here: a blocking query
		// from it returned at once, and a checker read it as stale).
		return res, (&api.WireError{Code: api.CodeNotFound, Msg: res.NotFound}).Err()
	}
	return res, nil
}

// Subscribe streams events from the agent's fan-out: one upstream stream
// per filter at a server, shared by every local subscriber (see fanout).
func (c *Client) Subscribe(ctx context.Context, types []string, from *uint64, heartbeat time.Duration) (<-chan backend.Event, uint64, error) {
	for _, t := range types {
		if err := api.ValidateIdentifier("type", t); err != nil {
			return nil, 0, err
		}
	}
	ch, start, err := c.hub.Subscribe(ctx, types, from, heartbeat)
	if err != nil {
		var coded api.Coded
		if !errors.As(err, &coded) && api.RefusalCode(err) == "" {
			err = api.NewError(api.CodeNoServer, err)
		}
		return nil, 0, err
	}
	return ch, start, nil
}

// EventStats are the fan-out's counters (upstreams open, subscribers,
// passthroughs).
func (c *Client) EventStats() fanout.Stats { return c.hub.Stats() }

// upstream opens one event stream at a server. The channel closes when
// the stream breaks or ctx ends; its first event is a heartbeat at the
// stream's starting position.
func (c *Client) upstream(ctx context.Context, types []string, from *uint64, heartbeat time.Duration) (<-chan *api.Event, error) {
	args := &agentrpc.SubscribeArgs{Types: types, From: from, Heartbeat: heartbeat}
	var st *transport.Stream
	var addr string
	err := c.tryServers(ctx, func(a string) (err error) {
		st, err = c.pool.Stream(ctx, a, agentrpc.Subscribe, args)
		addr = a
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(chan *api.Event, 64)
	c.goFunc(func() {
		defer close(out)
		defer st.Close()
		stop := context.AfterFunc(c.ctx, st.Close) // Shutdown ends it
		defer stop()
		for {
			ev := new(api.Event)
			if err := st.Recv(ev); err != nil {
				if !errors.Is(err, io.EOF) && ctx.Err() == nil && c.ctx.Err() == nil {
					c.logger.Debug("upstream event stream ended", "server", addr, "error", err)
				}
				return
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			case <-c.ctx.Done():
				return
			}
		}
	})
	return out, nil
}

// status asks a server for its view of the Raft cluster.
func (c *Client) status(ctx context.Context) (*agentrpc.StatusReply, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var st agentrpc.StatusReply
	if err := c.call(ctx, agentrpc.Status, struct{}{}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Leader is the leader's server address as a server reports it, "" when
// none is known or no server answers.
func (c *Client) Leader() string {
	st, err := c.status(c.ctx)
	if err != nil {
		return ""
	}
	return st.Leader
}

// Peers are the server addresses in the Raft configuration.
func (c *Client) Peers(ctx context.Context) ([]string, error) {
	st, err := c.status(ctx)
	if err != nil {
		return nil, err
	}
	return st.Peers, nil
}

// Members is the gossip pool as this agent sees it, with the leader and
// voters as a server reports them (unknown when none answers).
func (c *Client) Members(ctx context.Context) []api.Member {
	var leaderID string
	voters := map[string]bool{}
	if st, err := c.status(ctx); err == nil {
		leaderID = st.LeaderID
		for _, v := range st.Voters {
			voters[v] = true
		}
	}
	out := []api.Member{}
	for _, m := range c.gossip.Members() {
		out = append(out, m.API(leaderID, voters[m.Meta.ID]))
	}
	return out
}

// Health is "ok" when a server answers and knows a leader.
func (c *Client) Health() api.Health {
	h := api.Health{Status: "ok", Node: c.cfg.NodeID, Role: api.RoleClient, KnownServers: len(c.Servers())}
	st, err := c.status(c.ctx)
	switch {
	case err != nil:
		h.Status = "no_server"
	case st.Leader == "":
		h.Status = "no_leader"
	default:
		h.Leader = st.Leader
	}
	return h
}

// TransferLeadership is an operator call for servers.
func (c *Client) TransferLeadership(ctx context.Context) (string, error) {
	return "", fmt.Errorf("leadership transfer: %w", api.ErrUnsupported)
}

// RemovePeer is an operator call for servers.
func (c *Client) RemovePeer(ctx context.Context, id string) error {
	return fmt.Errorf("remove peer %s: %w", id, api.ErrUnsupported)
}

// ResumeReaping is an operator call for the leader.
func (c *Client) ResumeReaping(ctx context.Context) (api.ReapStatus, error) {
	return api.ReapStatus{}, fmt.Errorf("resume reaping: %w", api.ErrUnsupported)
}
