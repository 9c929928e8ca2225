package agent

import (
	"context"
	"sync"
	"time"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
)

var _ backend.Backend = (*Client)(nil)

// tokenTTL is how long a client agent trusts a token it resolved through
// a server (Consul's token_ttl is 30 s): a deleted token keeps working on
// client agents that cached it for up to this long.
const tokenTTL = 10 * time.Second

// tokenCache holds resolved tokens by secret hash.
type tokenCache struct {
	mu sync.Mutex
	m  map[string]cachedToken
}

type cachedToken struct {
	t       *api.ACLToken
	expires time.Time
}

// writeToken is the token a write carries to the server: the HTTP
// caller's, else the agent's own (-acl-agent-token), which the agent's
// plugin discovery and socket registrations use.
func (c *Client) writeToken(ctx context.Context) string {
	if t := api.Token(ctx); t != "" {
		return t
	}
	return c.cfg.ACLToken
}

// ResolveToken asks a server for the token (sending only its hash),
// cached for tokenTTL.
func (c *Client) ResolveToken(ctx context.Context, secret string) (*api.ACLToken, error) {
	h := api.HashSecret(secret)
	now := time.Now()
	c.tokens.mu.Lock()
	if e, ok := c.tokens.m[h]; ok && now.Before(e.expires) {
		c.tokens.mu.Unlock()
		return e.t, nil
	}
	c.tokens.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	t := new(api.ACLToken)
	if err := c.call(ctx, agentrpc.ACLResolve, &agentrpc.ACLResolveArgs{SecretHash: h}, t); err != nil {
		return nil, err
	}
	c.tokens.mu.Lock()
	if c.tokens.m == nil || len(c.tokens.m) > 4096 {
		c.tokens.m = map[string]cachedToken{} // bounded: start over
	}
	c.tokens.m[h] = cachedToken{t: t, expires: now.Add(tokenTTL)}
	c.tokens.mu.Unlock()
	return t, nil
}

// ACLBootstrap bootstraps through a server.
func (c *Client) ACLBootstrap(ctx context.Context) (api.ACLTokenSecret, error) {
	var out api.ACLTokenSecret
	err := c.call(ctx, agentrpc.ACLBootstrap, &struct{}{}, &out)
	return out, err
}

// ACLTokenCreate creates a token through a server, which checks the
// caller's token again.
func (c *Client) ACLTokenCreate(ctx context.Context, req api.ACLTokenCreateRequest) (api.ACLTokenSecret, error) {
	var out api.ACLTokenSecret
	err := c.call(ctx, agentrpc.ACLTokenCreate, &agentrpc.ACLTokenCreateArgs{Token: api.Token(ctx), Request: req}, &out)
	return out, err
}

// ACLTokens lists the tokens through a server.
func (c *Client) ACLTokens(ctx context.Context) ([]api.ACLToken, error) {
	var out []api.ACLToken
	err := c.call(ctx, agentrpc.ACLTokens, &agentrpc.ACLCallerArgs{Token: api.Token(ctx)}, &out)
	return out, err
}

// ACLTokenDelete deletes a token through a server, and forgets it here.
func (c *Client) ACLTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error) {
	var out api.WriteResult
	err := c.call(ctx, agentrpc.ACLTokenDelete, &agentrpc.ACLTokenDeleteArgs{Token: api.Token(ctx), AccessorID: accessorID, RequestID: api.RequestID(ctx)}, &out)
	if err == nil {
		c.tokens.mu.Lock()
		clear(c.tokens.m) // its hash is not known here; drop them all
		c.tokens.mu.Unlock()
	}
	return out, err
}
