package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/plugreg/plugreg/api"
)

// AutopilotHealth returns the servers' health as the answering agent
// gathers it; an unhealthy cluster is an answer (the server says 429),
// not an error.
func (c *Client) AutopilotHealth(ctx context.Context) (api.AutopilotHealth, error) {
	var h api.AutopilotHealth
	resp, err := c.do(ctx, http.MethodGet, "/v1/operator/autopilot/health", nil, nil, nil)
	if err != nil {
		return h, err
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			return h, fmt.Errorf("decode autopilot health: %w", err)
		}
		return h, nil
	}
	return h, c.decode(resp, &h)
}

// AgentSelf describes the answering agent (GET /v1/agent/self).
func (c *Client) AgentSelf(ctx context.Context) (api.AgentSelf, error) {
	var s api.AgentSelf
	_, err := c.query(ctx, "/v1/agent/self", nil, &s)
	return s, err
}

// TransferLeadership asks the leader (through the answering server) to
// hand leadership to another voter; it returns the new leader's address.
func (c *Client) TransferLeadership(ctx context.Context) (string, error) {
	var out struct{ Leader string }
	return out.Leader, c.aclCall(ctx, http.MethodPost, "/v1/operator/leadership-transfer", nil, &out)
}

// ResumeReaping asks the leader (the answering agent must be the leader)
// to reap the failed nodes its guard holds, until the guard releases, and
// returns the guard's state.
func (c *Client) ResumeReaping(ctx context.Context) (api.ReapStatus, error) {
	var out api.ReapStatus
	return out, c.aclCall(ctx, http.MethodPost, "/v1/operator/reap/resume", nil, &out)
}

// RemovePeer removes a server from the Raft configuration by its ID.
func (c *Client) RemovePeer(ctx context.Context, id string) error {
	var out struct{ Removed string }
	return c.aclCall(ctx, http.MethodDelete, "/v1/operator/peers/"+url.PathEscape(id), nil, &out)
}
