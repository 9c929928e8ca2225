package registry

import (
	"context"
	"fmt"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// ACLBootstrap proposes the bootstrap token (its secret already hashed by
// the caller: only the hash reaches the log). It fails with
// api.ErrACLBootstrapped after the first.
//
// Token creation never carries a request ID: a retry under the same ID
// would be answered with the first attempt's result while the caller
// holds the retry's secret, which was never stored. A retried create
// makes a second token (or finds the cluster bootstrapped) instead.
func (s *Store) ACLBootstrap(ctx context.Context, t fsm.ACLToken) (api.WriteResult, error) {
	res, err := s.write(ctx, &fsm.ACLBootstrapRequest{Token: t})
	if err != nil {
		return res, fmt.Errorf("acl bootstrap: %w", err)
	}
	return res, nil
}

// ACLTokenSet proposes a new token.
func (s *Store) ACLTokenSet(ctx context.Context, t fsm.ACLToken) (api.WriteResult, error) {
	res, err := s.write(ctx, &fsm.ACLTokenSetRequest{Token: t})
	if err != nil {
		return res, fmt.Errorf("acl token create %s: %w", t.AccessorID, err)
	}
	return res, nil
}

// ACLTokenDelete proposes deleting a token.
func (s *Store) ACLTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error) {
	res, err := s.write(ctx, &fsm.ACLTokenDeleteRequest{AccessorID: accessorID, RequestID: RequestID(ctx)})
	if err != nil {
		return res, fmt.Errorf("acl token delete %s: %w", accessorID, err)
	}
	return res, nil
}

// ACLState is the current state, for resolving tokens.
func (s *Store) ACLState() *fsm.State { return s.fsm.State() }
