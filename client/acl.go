package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/plugreg/plugreg/api"
)

// ACLBootstrap creates the cluster's first token, an operator token, and
// returns it with its secret (shown only this once). A second call fails
// with an error matching api.ErrACLBootstrapped.
func (c *Client) ACLBootstrap(ctx context.Context) (api.ACLTokenSecret, error) {
	var out api.ACLTokenSecret
	err := c.aclCall(ctx, http.MethodPut, "/v1/acl/bootstrap", nil, &out)
	return out, err
}

// ACLTokenCreate creates a token with policies (the client's token must be
// an operator's) and returns it with its secret.
func (c *Client) ACLTokenCreate(ctx context.Context, description string, policies []api.ACLPolicy) (api.ACLTokenSecret, error) {
	return c.aclTokenCreate(ctx, api.ACLTokenCreateRequest{Description: description, Policies: policies})
}

// ACLAgentTokenCreate creates a token bound to node: a client agent's
// (-acl-agent-token), which registers and deregisters only that node's
// plugins whatever its policies grant (no operator policy).
func (c *Client) ACLAgentTokenCreate(ctx context.Context, node, description string, policies []api.ACLPolicy) (api.ACLTokenSecret, error) {
	return c.aclTokenCreate(ctx, api.ACLTokenCreateRequest{Description: description, Policies: policies, Node: node})
}

func (c *Client) aclTokenCreate(ctx context.Context, req api.ACLTokenCreateRequest) (api.ACLTokenSecret, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.ACLTokenSecret{}, err
	}
	var out api.ACLTokenSecret
	err = c.aclCall(ctx, http.MethodPut, "/v1/acl/token", body, &out)
	return out, err
}

// ACLTokens lists every token, without secrets.
func (c *Client) ACLTokens(ctx context.Context) ([]api.ACLToken, error) {
	var out []api.ACLToken
	err := c.aclCall(ctx, http.MethodGet, "/v1/acl/tokens", nil, &out)
	return out, err
}

// ACLTokenSelf returns the client's own token.
func (c *Client) ACLTokenSelf(ctx context.Context) (api.ACLToken, error) {
	var out api.ACLToken
	err := c.aclCall(ctx, http.MethodGet, "/v1/acl/token/self", nil, &out)
	return out, err
}

// ACLTokenDelete deletes a token by its accessor ID.
func (c *Client) ACLTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error) {
	return c.write(ctx, http.MethodDelete, "/v1/acl/token/"+url.PathEscape(accessorID), nil, "")
}

// aclCall sends no request ID: a token create is not deduplicated (the
// server would answer a retry with the first attempt's result and the
// retry's secret; see registry.ACLBootstrap).
func (c *Client) aclCall(ctx context.Context, method, path string, body []byte, out interface{}) error {
	resp, err := c.do(ctx, method, path, nil, body, nil)
	if err != nil {
		return err
	}
	return c.decode(resp, out)
}
