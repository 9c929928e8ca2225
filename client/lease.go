package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/plugreg/plugreg/api"
)

// Leases: register with PluginInfo.TTL set (api.MinTTL to api.MaxTTL), and
// the instance stays registered only while its holder renews it at least
// once a TTL; otherwise the leader expires it (an "expired" event). A
// renewal is not a write: it is never in the log, carries no request ID,
// and is safe to repeat.

// Renew renews the lease of a leased instance: its deadline becomes the
// leader's now plus its TTL, which the answer carries. It moves through
// the nodes on failures another node may not have (as every call does).
// An error matching api.ErrNotFound means there is no such lease: the
// instance expired, was deregistered, or was registered without a TTL;
// register it again.
func (c *Client) Renew(ctx context.Context, ptype, name, allocID string) (api.RenewResult, error) {
	path := "/v1/plugins/" + seg(ptype) + "/" + seg(name) + "/" + seg(allocID) + "/renew"
	resp, err := c.do(ctx, http.MethodPut, path, nil, nil, nil)
	if err != nil {
		return api.RenewResult{}, err
	}
	var res api.RenewResult
	if err := c.decode(resp, &res); err != nil {
		return api.RenewResult{}, err // the answer names the instance
	}
	return res, nil
}

// KeepAlive renews the lease of a leased instance at once and then every
// every (zero: a third of the TTL each renewal reports), until ctx ends:
// then it returns nil. A renewal that fails where another node, or a
// moment, may serve it (no leader during an election, a node down) is
// tried again until it succeeds; a new leader starts every lease afresh,
// so a holder that keeps trying through an election keeps its
// registration; so is one that no agent answered at all (ErrNoAgent: the
// host's agent restarting). A renewal gets as long as the wait between two (before
// the first answer, api.MinTTL): one that a hung node holds longer is
// abandoned and sent to the next node, before the lease runs out. It
// returns the error of a renewal refused for good: one matching
// api.ErrNotFound when the lease is gone (the caller registers again),
// api.ErrPermissionDenied or api.ErrConflict when its token may not renew it. It
// logs nothing and starts no goroutine: run it in one of yours.
func (c *Client) KeepAlive(ctx context.Context, ptype, name, allocID string, every time.Duration) error {
	wait := every
	if wait <= 0 {
		wait = api.MinTTL
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, wait)
		res, err := c.Renew(rctx, ptype, name, allocID)
		timedOut := rctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && timedOut {
			continue // a node held it: the next attempt starts on another (do)
		}
		if errors.Is(err, ErrNoAgent) {
			// Every agent refused at once (the one agent of the host
			// restarting): one may be back before the lease runs out,
			// so wait a little and try again, as for a node that hung.
			if !sleepCtx(ctx, min(wait, time.Second)) {
				return nil
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("keep alive %s/%s/%s: %w", ptype, name, allocID, err)
		}
		if every <= 0 {
			wait = max(time.Duration(res.TTL)/3, 10*time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
