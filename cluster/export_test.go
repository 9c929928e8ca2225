package cluster

import (
	"context"

	"github.com/plugreg/plugreg/fsm"
)

// ProposeExpiry proposes an expiry as the leader's lessor does, for the
// tests outside the package.
func (s *Server) ProposeExpiry(ctx context.Context, batch []fsm.ExpiredLease) error {
	return s.proposeExpiry(ctx, batch)
}
