package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/plugreg/plugreg/api"
)

// SnapshotSave writes a backup archive of the registry (package snapshot's format)
// to w: the state of a server after a linearizable read barrier, or its
// state as it stands with q.Stale. It needs an operator token when ACLs
// are on.
func (c *Client) SnapshotSave(ctx context.Context, w io.Writer, q *QueryOptions) error {
	var query url.Values
	if q != nil && q.Stale {
		query = url.Values{"stale": {""}}
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/operator/snapshot", query, nil, nil)
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("snapshot save: %w", decodeError(resp))
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	return nil
}

// SnapshotRestore replaces the registry with the archive in r (the server
// checks it whole first: a damaged, foreign or newer file is refused with
// api.ErrInvalid and changes nothing; the CLI checks it before sending, with
// package snapshot). It carries a request ID (a fresh one, or ctx's from
// WithRequestID) that it keeps across its own retries: a restore resent
// after a lost answer applies once, so the writes acknowledged after the
// first copy are not overwritten by the second.
func (c *Client) SnapshotRestore(ctx context.Context, r io.Reader) (api.WriteResult, error) {
	archive, err := io.ReadAll(r)
	if err != nil {
		return api.WriteResult{}, fmt.Errorf("snapshot restore: %w", err)
	}
	res, err := c.write(ctx, http.MethodPut, "/v1/operator/snapshot", archive, "")
	if err != nil {
		return res, fmt.Errorf("snapshot restore: %w", err)
	}
	return res, nil
}
