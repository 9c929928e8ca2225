package cluster

import (
	"context"
	"fmt"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/httpapi"
)

var _ httpapi.ACLBackend = (*Backend)(nil)

// ResolveToken finds a token in this server's replica of the state: a
// token is usable on a server once the entry that created it has been
// applied there (on the server that created it, before the create
// returned).
func (b *Backend) ResolveToken(ctx context.Context, secret string) (*api.ACLToken, error) {
	return b.resolveHash(api.HashSecret(secret))
}

func (b *Backend) resolveHash(hash string) (*api.ACLToken, error) {
	t, ok := b.s.store.ACLState().ACLTokenBySecretHash(hash)
	if !ok {
		return nil, api.ErrACLNotFound
	}
	out := t.API()
	return &out, nil
}

// ACLBootstrap creates the operator token, once per cluster.
func (b *Backend) ACLBootstrap(ctx context.Context) (api.ACLTokenSecret, error) {
	if idx := b.s.store.ACLState().ACLBootstrapped(); idx != 0 {
		return api.ACLTokenSecret{}, fmt.Errorf("%w (at index %d)", api.ErrACLBootstrapped, idx)
	}
	return b.newToken(ctx, "bootstrap token (operator)", []api.ACLPolicy{{Kind: api.ACLOperator}}, true)
}

// ACLTokenCreate creates a token with req's policies.
func (b *Backend) ACLTokenCreate(ctx context.Context, req api.ACLTokenCreateRequest) (api.ACLTokenSecret, error) {
	return b.newToken(ctx, req.Description, req.Policies, false)
}

// newToken makes the secret here, at the edge: the log, the snapshots and
// every replica only ever hold its hash.
func (b *Backend) newToken(ctx context.Context, desc string, ps []api.ACLPolicy, bootstrap bool) (api.ACLTokenSecret, error) {
	accessor, secret, err := api.NewACLSecret()
	if err != nil {
		return api.ACLTokenSecret{}, err
	}
	t := fsm.ACLToken{AccessorID: accessor, SecretHash: api.HashSecret(secret), Description: desc, Policies: ps}
	var res api.WriteResult
	if bootstrap {
		res, err = b.s.store.ACLBootstrap(ctx, t)
	} else {
		res, err = b.s.store.ACLTokenSet(ctx, t)
	}
	if err != nil {
		return api.ACLTokenSecret{}, apiError(err)
	}
	t.CreateIndex = res.Index
	return api.ACLTokenSecret{ACLToken: t.API(), SecretID: secret}, nil
}

// ACLTokens lists every token (no secrets), from this server's replica.
func (b *Backend) ACLTokens(ctx context.Context) ([]api.ACLToken, error) {
	var out []api.ACLToken
	for _, t := range b.s.store.ACLState().ACLTokens() {
		out = append(out, t.API())
	}
	return out, nil
}

// ACLTokenDelete deletes a token by accessor.
func (b *Backend) ACLTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error) {
	res, err := b.s.store.ACLTokenDelete(ctx, accessorID)
	return res, apiError(err)
}

// rpcAuthorizer is what a client agent's call may do: its token's
// policies, or the default policy without one; everything with ACLs off.
func (s *Server) rpcAuthorizer(secret string) (api.Authorizer, error) {
	if !s.cfg.ACLEnabled {
		return api.AllowAll(), nil
	}
	if secret == "" {
		if s.cfg.ACLDefaultDeny {
			return api.DenyAll(), nil
		}
		return api.AllowAll(), nil
	}
	t, err := s.Backend().ResolveToken(context.Background(), secret)
	if err != nil {
		return api.DenyAll(), err
	}
	return api.TokenAuthorizer(t), nil
}

// rpcAllowed checks a client agent's call: ok says what its token may do.
func (s *Server) rpcAllowed(secret string, ok func(api.Authorizer) bool, what string) error {
	a, err := s.rpcAuthorizer(secret)
	if err != nil {
		return err
	}
	if !ok(a) {
		return fmt.Errorf("%w: the agent's token may not %s", api.ErrPermissionDenied, what)
	}
	return nil
}

// handleACLRPC serves client agents' ACL calls.
func (s *Server) handleACLRPC(ctx context.Context, method string, decode func(interface{}) error) (reply interface{}, handled bool, err error) {
	b := s.Backend()
	isOperator := func(a api.Authorizer) bool { return a.IsOperator() }
	switch method {
	case api.RPCACLResolve:
		var args api.ACLResolveArgs
		if err := decode(&args); err != nil {
			return nil, true, toWire(err)
		}
		t, err := b.resolveHash(args.SecretHash)
		return t, true, toWire(err)
	case api.RPCACLBootstrap:
		var none struct{}
		if err := decode(&none); err != nil {
			return nil, true, toWire(err)
		}
		t, err := b.ACLBootstrap(ctx)
		return t, true, toWire(err)
	case api.RPCACLTokenCreate:
		var args api.ACLTokenCreateArgs
		if err := decode(&args); err != nil {
			return nil, true, toWire(err)
		}
		if err := s.rpcAllowed(args.Token, isOperator, "create tokens"); err != nil {
			return nil, true, toWire(err)
		}
		if err := api.ValidatePolicies(args.Request.Policies); err != nil {
			return nil, true, toWire(err)
		}
		if err := api.ValidateDescription(args.Request.Description); err != nil {
			return nil, true, toWire(err)
		}
		t, err := b.ACLTokenCreate(ctx, args.Request)
		return t, true, toWire(err)
	case api.RPCACLTokens:
		var args api.ACLCallerArgs
		if err := decode(&args); err != nil {
			return nil, true, toWire(err)
		}
		if err := s.rpcAllowed(args.Token, isOperator, "list tokens"); err != nil {
			return nil, true, toWire(err)
		}
		ts, err := b.ACLTokens(ctx)
		return ts, true, toWire(err)
	case api.RPCACLTokenDelete:
		var args api.ACLTokenDeleteArgs
		if err := decode(&args); err != nil {
			return nil, true, toWire(err)
		}
		if err := s.rpcAllowed(args.Token, isOperator, "delete tokens"); err != nil {
			return nil, true, toWire(err)
		}
		if err := api.ValidateIdentifier("accessor", args.AccessorID); err != nil {
			return nil, true, toWire(err)
		}
		res, err := b.ACLTokenDelete(ctx, args.AccessorID)
		return res, true, toWire(err)
	}
	return nil, false, nil
}
