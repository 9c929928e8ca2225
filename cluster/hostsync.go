package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/fsm"
)

// SyncHost makes a host's anti-entropy writes (see api.HostSyncRequest).
func (b *Backend) SyncHost(ctx context.Context, req api.HostSyncRequest) (api.HostSyncResult, error) {
	res, err := b.s.hostSync(ctx, req)
	return res, apiError(err)
}

// hostSync writes req as one fsm.HostSyncCommand once every server of the
// configuration applies it; before that (a rolling upgrade) as the
// single writes a host made before it, one entry each. Either way it is
// checked whole first: a bad request writes nothing.
func (s *Server) hostSync(ctx context.Context, req api.HostSyncRequest) (api.HostSyncResult, error) {
	if err := req.Validate(); err != nil {
		return api.HostSyncResult{}, err
	}
	for _, p := range req.Register {
		if err := api.ValidateNewPlugin(p); err != nil {
			return api.HostSyncResult{}, fmt.Errorf("host sync of node %s: %w", req.NodeID, err)
		}
	}
	// The sync carries no request ID (a repeat changes nothing); the
	// single writes must not share one either.
	ctx = api.WithRequestID(ctx, "")
	if old := s.serverBelow(rpcVersionHostSync); old != "" {
		return s.hostSyncOneByOne(ctx, req)
	}
	res, err := s.commit(ctx, &fsm.HostSyncRequest{HostSyncRequest: req, IfNodeID: backend.IfNodeID(ctx)}, anyServer)
	if err != nil {
		var index uint64
		if res != nil {
			index = res.Index
		}
		return api.HostSyncResult{Index: index}, fmt.Errorf("host sync of node %s: %w", req.NodeID, err)
	}
	s.renewSyncedLeases(ctx, req, res.Refused)
	return api.HostSyncResult{Index: res.Index, Result: res.Result, Refused: res.Refused}, nil
}

// renewSyncedLeases renews the leases of the leased registrations a sync
// made, as a registration that changed nothing renews its own (register):
// a host re-asserting a leased instance keeps it alive. Which of them
// changed the entry does not say; renewing one that did is harmless.
func (s *Server) renewSyncedLeases(ctx context.Context, req api.HostSyncRequest, refused []int) {
	skip := make(map[int]bool, len(refused))
	for _, i := range refused {
		skip[i] = true
	}
	for i, p := range req.Register {
		if p.TTL != 0 && !skip[i] {
			s.renewAfterRegister(ctx, p)
		}
	}
}

// hostSyncOneByOne makes req's writes one entry each, as a host did
// before fsm.HostSyncCommand: what a server proposes while another does
// not apply the batch. A write its condition refuses is reported as the
// batch would report it; any other failure ends the sync, with the
// writes already made standing (each is a write of its own).
func (s *Server) hostSyncOneByOne(ctx context.Context, req api.HostSyncRequest) (api.HostSyncResult, error) {
	var out api.HostSyncResult
	changed := false
	note := func(i int, res api.WriteResult, err error) error {
		switch {
		case errors.Is(err, api.ErrConflict):
			out.Refused = append(out.Refused, i)
			return nil
		case err != nil:
			return fmt.Errorf("host sync of node %s, one write at a time: %w", req.NodeID, err)
		}
		out.Index = max(out.Index, res.Index)
		changed = changed || (res.Result != api.ResultUnchanged && res.Result != api.ResultAbsent)
		return nil
	}
	for i, p := range req.Register {
		res, err := s.register(ctx, p.Copy())
		if err := note(i, res, err); err != nil {
			return out, err
		}
	}
	for i, d := range req.Deregister {
		res, err := s.deregister(ctx, api.DeregisterRequest{Type: d.Type, Name: d.Name, AllocID: d.AllocID, IfNodeID: req.NodeID, IfModifyIndex: d.IfModifyIndex})
		if err := note(len(req.Register)+i, res, err); err != nil {
			return out, err
		}
	}
	out.Result = api.ResultUnchanged
	if changed {
		out.Result = fsm.ResultSynced
	}
	return out, nil
}
