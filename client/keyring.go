package client

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/plugreg/plugreg/api"
)

// Keyring lists the gossip keys of the agent that answers (the first of
// Addrs that does). Keys are per agent: to act on the cluster, call every
// member (the CLI's keyring command does).
func (c *Client) Keyring(ctx context.Context) (api.KeyringStatus, error) {
	var st api.KeyringStatus
	return st, c.aclCall(ctx, http.MethodGet, "/v1/agent/keyring", nil, &st)
}

// KeyringInstall adds key to the answering agent's keyring.
func (c *Client) KeyringInstall(ctx context.Context, key string) (api.KeyringStatus, error) {
	return c.keyringCall(ctx, http.MethodPost, key)
}

// KeyringUse makes an installed key the answering agent's primary key.
func (c *Client) KeyringUse(ctx context.Context, key string) (api.KeyringStatus, error) {
	return c.keyringCall(ctx, http.MethodPut, key)
}

// KeyringRemove removes a key that is not primary from the answering
// agent's keyring.
func (c *Client) KeyringRemove(ctx context.Context, key string) (api.KeyringStatus, error) {
	return c.keyringCall(ctx, http.MethodDelete, key)
}

func (c *Client) keyringCall(ctx context.Context, method, key string) (api.KeyringStatus, error) {
	body, _ := json.Marshal(api.KeyringRequest{Key: key})
	var st api.KeyringStatus
	return st, c.aclCall(ctx, method, "/v1/agent/keyring", body, &st)
}
