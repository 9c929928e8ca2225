package agent

import (
	"context"
	"fmt"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
)

// AutopilotHealth asks a server for the servers' health, on behalf of the
// HTTP caller (whose token the server checks).
func (c *Client) AutopilotHealth(ctx context.Context) (api.AutopilotHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	var h api.AutopilotHealth
	if err := c.call(ctx, agentrpc.AutopilotHealth, &agentrpc.ACLCallerArgs{Token: api.Token(ctx)}, &h); err != nil {
		return h, fmt.Errorf("autopilot health: %w", err)
	}
	return h, nil
}
