package cluster

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/snapshot"
)

// SnapshotSave takes a backup of the registry (package snapshot): this
// server's state after a linearizable read barrier, so it holds every
// write acknowledged before the call, or without the barrier when stale.
// The state is an immutable version: taking it blocks no write, and write
// streams its archive without holding it in memory. A refusal (no
// leader, a timeout) comes back as the error, before anything is written.
func (b *Backend) SnapshotSave(ctx context.Context, stale bool) (write func(io.Writer) error, err error) {
	c := api.Linearizable
	if stale {
		c = api.Stale
	}
	st, _, err := b.s.Read(ctx, c)
	if err != nil {
		return nil, apiError(err)
	}
	meta := snapshot.Meta{Term: b.s.raft.CurrentTerm(), NodeID: b.s.cfg.NodeID, Created: time.Now().UTC().Truncate(time.Second)}
	if servers, err := b.s.RaftConfiguration(); err == nil {
		for _, srv := range servers {
			meta.Servers = append(meta.Servers, snapshot.Server{ID: string(srv.ID), Address: string(srv.Address), Voter: srv.Suffrage == raft.Voter})
		}
	}
	return func(w io.Writer) error {
		if err := snapshot.Encode(w, meta, st); err != nil {
			return fmt.Errorf("snapshot save: %w", err)
		}
		return nil
	}, nil
}

// SnapshotRestore replaces the registry with an archive's contents through
// the log (fsm.RestoreCommand): checked whole here first (a damaged,
// foreign or newer archive is refused and nothing is proposed), then
// committed by a quorum and applied by every server at one index, where
// every subscriber resets. It returns once this server applied it. With a
// request ID in ctx (api.WithRequestID), a retry applies nothing and
// answers the first one's index.
func (b *Backend) SnapshotRestore(ctx context.Context, archive []byte) (api.WriteResult, error) {
	meta, stream, err := snapshot.Read(bytes.NewReader(archive))
	if err != nil {
		return api.WriteResult{}, err
	}
	req, st, err := fsm.NewRestoreRequest(stream, scopedRequestID(ctx, "snapshot-restore"))
	if err != nil {
		return api.WriteResult{}, fmt.Errorf("snapshot restore: %w", err)
	}
	if err := b.padFor(ctx, st); err != nil {
		return api.WriteResult{}, err
	}
	res, err := b.s.commit(ctx, req, anyServer)
	if err != nil {
		return api.WriteResult{}, apiError(err)
	}
	if res.Duplicate {
		b.s.logger.Info("a restore's retry: applied once already", "index", res.Index)
		return api.WriteResult{Index: res.Index, Result: api.ResultRestored}, nil
	}
	b.s.logger.Info("restored a snapshot", "index", res.Index, "snapshot_index", meta.Index, "snapshot_node", meta.NodeID, "snapshot_created", meta.Created)
	return api.WriteResult{Index: res.Index, Result: api.ResultRestored}, nil
}

// padFor makes sure a restore of st lands where st fits: a backup from
// further along than this log is restamped to end at the restore's index
// (fsm's restamped), which needs that index above its longest recency
// list. A young cluster's log is padded up to there first, with entries
// that change nothing.
func (b *Backend) padFor(ctx context.Context, st *fsm.State) error {
	cur := b.s.AppliedIndex()
	need := uint64(st.LongestRecency()) + 1 // the restore's index must reach it
	if st.Index() <= cur || cur+1 >= need {
		return nil
	}
	n := int(need - cur - 1)
	b.s.logger.Info("padding the log before a restore from further along", "entries", n, "applied", cur, "longest_recency", need-1)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := b.s.commit(ctx, &fsm.PaddingRequest{}, anyServer); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("snapshot restore: padding the log: %w", apiError(first))
	}
	return nil
}
