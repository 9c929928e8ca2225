package agent

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
)

// snapshotTimeout bounds a snapshot call through a server: a large
// registry's archive takes a while to encode, send and, for a restore,
// replicate and apply.
const snapshotTimeout = 5 * time.Minute

// SnapshotSave gets a backup archive from a server, for the HTTP caller
// (whose token the server checks: an operator's). It comes whole, in one
// RPC reply.
func (c *Client) SnapshotSave(ctx context.Context, stale bool) (func(io.Writer) error, error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	var archive []byte
	if err := c.call(ctx, agentrpc.SnapshotSave, &agentrpc.SnapshotSaveArgs{Token: api.Token(ctx), Stale: stale}, &archive); err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	return func(w io.Writer) error {
		_, err := w.Write(archive)
		return err
	}, nil
}

// SnapshotRestore restores an archive through a server, with the HTTP
// caller's request ID: a caller that retries it after an unknown outcome
// gets the first one's result, not a second restore over the writes
// acknowledged since. It is not retried here.
func (c *Client) SnapshotRestore(ctx context.Context, archive []byte) (api.WriteResult, error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	var res api.WriteResult
	if err := c.call(ctx, agentrpc.SnapshotRestore, &agentrpc.SnapshotRestoreArgs{Token: api.Token(ctx), Archive: archive, RequestID: api.RequestID(ctx)}, &res); err != nil {
		return res, fmt.Errorf("snapshot restore: %w", err)
	}
	return res, nil
}
