package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
// ErrInvalid and changes nothing; the CLI checks it before sending, with
// package snapshot). A retry after a lost answer is safe: applied twice,
// a restore installs the same contents.
func (c *Client) SnapshotRestore(ctx context.Context, r io.Reader) (WriteResult, error) {
	archive, err := io.ReadAll(r)
	if err != nil {
		return WriteResult{}, fmt.Errorf("snapshot restore: %w", err)
	}
	var res WriteResult
	resp, err := c.do(ctx, http.MethodPut, "/v1/operator/snapshot", nil, archive, nil)
	if err != nil {
		return res, fmt.Errorf("snapshot restore: %w", err)
	}
	if err := c.decode(resp, &res); err != nil {
		return res, fmt.Errorf("snapshot restore: %w", err)
	}
	return res, nil
}
