package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

var _ backend.Backend = (*Backend)(nil)

// ResolveToken finds a token in this server's replica of the state. A
// token this replica does not hold is refused only once the replica has
// applied everything the cluster committed before the request (a
// linearizable read's barrier): a replica behind the leader (restarted
// and not yet replayed, wiped and rejoining, or just behind the entry
// that created the token) never answers acl_not_found for a token the
// cluster holds. Refusals end streams and clients for good
// (client.Stream stops on them), so a refusal must be the cluster's word,
// not one replica's lag. Without a leader to ask, the answer is the
// read's own retryable error. Tokens the replica holds resolve at once,
// with no leader needed.
func (b *Backend) ResolveToken(ctx context.Context, secret string) (*api.ACLToken, error) {
	return b.resolveHash(ctx, api.HashSecret(secret))
}

func (b *Backend) resolveHash(ctx context.Context, hash string) (*api.ACLToken, error) {
	st := b.s.fsm.State()
	t, ok := st.ACLTokenBySecretHash(hash)
	if !ok {
		var err error
		if st, _, err = b.s.Read(ctx, api.Linearizable); err != nil {
			return nil, fmt.Errorf("resolving an ACL token this server does not hold (yet): %w", apiError(err))
		}
		t, ok = st.ACLTokenBySecretHash(hash)
	}
	if !ok {
		return nil, api.ErrACLNotFound
	}
	out := t.API()
	return &out, nil
}

// ACLChanged returns a channel closed once this server applies an ACL
// change (registry.Journal.ACLChanged): the HTTP API re-checks its open
// streams' and blocking queries' tokens then.
func (b *Backend) ACLChanged() <-chan struct{} { return b.s.journal.ACLChanged() }

// ACLBootstrap creates the operator token, once per cluster.
func (b *Backend) ACLBootstrap(ctx context.Context) (api.ACLTokenSecret, error) {
	if idx := b.s.fsm.State().ACLBootstrapped(); idx != 0 {
		return api.ACLTokenSecret{}, fmt.Errorf("%w (at index %d)", api.ErrACLBootstrapped, idx)
	}
	return b.newToken(ctx, api.ACLTokenCreateRequest{Description: "bootstrap token (operator)", Policies: []api.ACLPolicy{{Kind: api.ACLOperator}}}, true)
}

// ACLTokenCreate creates a token with req's policies.
func (b *Backend) ACLTokenCreate(ctx context.Context, req api.ACLTokenCreateRequest) (api.ACLTokenSecret, error) {
	return b.newToken(ctx, req, false)
}

// newToken makes the secret here, at the edge: the log, the snapshots and
// every replica only ever hold its hash.
func (b *Backend) newToken(ctx context.Context, req api.ACLTokenCreateRequest, bootstrap bool) (api.ACLTokenSecret, error) {
	// A new token's node is a new name (the log's decoder, for older
	// entries, accepts what an older release did).
	if req.Node != "" {
		if err := api.ValidateNewIdentifier("Node", req.Node); err != nil {
			return api.ACLTokenSecret{}, err
		}
	}
	accessor, secret, err := api.NewACLSecret()
	if err != nil {
		return api.ACLTokenSecret{}, err
	}
	t := fsm.ACLToken{AccessorID: accessor, SecretHash: api.HashSecret(secret), Description: req.Description, Policies: req.Policies, Node: req.Node}
	var res api.WriteResult
	if bootstrap {
		res, err = b.s.aclBootstrap(ctx, t)
	} else {
		res, err = b.s.aclTokenSet(ctx, t)
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
	for _, t := range b.s.fsm.State().ACLTokens() {
		out = append(out, t.API())
	}
	return out, nil
}

// ACLTokenDelete deletes a token by accessor.
func (b *Backend) ACLTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error) {
	res, err := b.s.aclTokenDelete(ctx, accessorID)
	return res, apiError(err)
}

// bootstrapInitialToken creates the operator token whose secret is
// ACLInitialManagementToken, unless the cluster is bootstrapped already:
// by an operator, or by an earlier leader with the same secret. The FSM
// applies one bootstrap only, so a race with plugreg acl bootstrap or a
// deposed leader's attempt leaves one token. A failure is retried until
// it succeeds or leadership ends (stop), beside the leader's other duties.
func (s *Server) bootstrapInitialToken(stop <-chan struct{}) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		if idx := s.fsm.State().ACLBootstrapped(); idx != 0 {
			return
		}
		accessor, _, err := api.NewACLSecret()
		if err == nil {
			t := fsm.ACLToken{AccessorID: accessor, SecretHash: api.HashSecret(s.cfg.ACLInitialManagementToken),
				Description: "initial management token (operator)", Policies: []api.ACLPolicy{{Kind: api.ACLOperator}}}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ApplyTimeout)
			var res api.WriteResult
			res, err = s.aclBootstrap(ctx, t)
			cancel()
			switch {
			case err == nil:
				s.logger.Info("ACLs bootstrapped with the initial management token", "accessor", accessor, "index", res.Index)
				return
			case errors.Is(err, api.ErrACLBootstrapped):
				return
			}
		}
		s.logger.Warn("bootstrapping ACLs with the initial management token failed; retrying", "error", err, "in", wait)
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
	}
}
