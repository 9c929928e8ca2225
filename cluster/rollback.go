package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster/raftx"
)

// Rollback detection. A data dir put back to an older copy (a VM
// snapshot, a backup of the disk) forgets the term, the vote and the
// entries its server acknowledged, and nothing in the copy says so: the
// whole dir went back together. So the other servers remember for it.
// Every ackReportInterval each server tells every other server of the
// configuration how far it has stored and applied the log (its applied
// index: committed, so never truncated, and fsynced before it was
// applied); each keeps the highest it was told, per server, in its own
// stable store. At start, before Raft (which votes as soon as it runs), a
// server asks the others whether its log reaches what they recorded for
// it; one that does not refuses to start, with one line and status 65,
// as a damaged data dir does.
//
// A record belongs to an incarnation of the data dir: a random ID made
// when the dir is first used, kept in the stable store. A dir emptied
// and started again (the recovery docs/operations.md prescribes) is a new
// incarnation and starts from nothing; a restored copy carries the old
// one.
//
// Limits: a rollback is found only when a server that holds the record
// answers at start (one that was itself down, or restored, may not hold
// it), and only past what was reported before the copy was taken plus
// up to one interval.

const (
	// rpcAckReport: ackReport -> ackReply; servers only, served before
	// Raft runs (a restarting server asks peers that may be starting too).
	rpcAckReport = "AckReport"

	ackReportInterval = time.Second
	// rollbackProbeWait bounds the start-time check: how long a server
	// waits for any peer to answer, and how long after the first answer
	// it waits for the others.
	rollbackProbeWait  = 5 * time.Second
	rollbackProbeGrace = 2 * time.Second

	incarnationKey = "plugreg_incarnation"
	ackedKeyPrefix = "plugreg_acked/"
)

// ackReport is a server's report of how far it stored and applied the
// log.
type ackReport struct {
	Node        string
	Incarnation string
	Index       uint64
	// Probe: the start-time question (Index is the log's end, which may
	// hold entries never committed): compare, never record.
	Probe bool
}

// ackReply answers a report.
type ackReply struct {
	// RolledBack: the reporter's index is below what this server
	// recorded for the same incarnation.
	RolledBack bool
	Recorded   uint64
}

// ackRecord is what a server recorded of another's reports.
type ackRecord struct {
	Incarnation string
	Index       uint64
}

// ackRecords are a server's records of the other servers' reports, kept
// in its stable store.
type ackRecords struct {
	stable raft.StableStore
	mu     sync.Mutex
	recs   map[string]ackRecord // loaded from the stable store on first use
}

func newAckRecords(stable raft.StableStore) *ackRecords {
	return &ackRecords{stable: stable, recs: map[string]ackRecord{}}
}

// getLocked is node's record (zero: none), read from the stable store
// once; a.mu is held.
func (a *ackRecords) getLocked(node string) (ackRecord, error) {
	if r, ok := a.recs[node]; ok {
		return r, nil
	}
	var r ackRecord
	b, err := raftx.StableValue(a.stable, []byte(ackedKeyPrefix+node))
	if err != nil {
		return r, err
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &r); err != nil {
			return r, fmt.Errorf("record of %s's acknowledged index: %w", node, err)
		}
	}
	a.recs[node] = r
	return r, nil
}

// report answers rep, and records a report's index when it is higher than
// the record (or from a new incarnation).
func (a *ackRecords) report(rep ackReport) (ackReply, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, err := a.getLocked(rep.Node)
	if err != nil {
		return ackReply{}, err
	}
	if r.Incarnation == rep.Incarnation && rep.Index < r.Index {
		return ackReply{RolledBack: true, Recorded: r.Index}, nil
	}
	if rep.Probe || (r.Incarnation == rep.Incarnation && rep.Index == r.Index) {
		return ackReply{Recorded: r.Index}, nil
	}
	next := ackRecord{Incarnation: rep.Incarnation, Index: rep.Index}
	b, _ := json.Marshal(next)
	if err := a.stable.Set([]byte(ackedKeyPrefix+rep.Node), b); err != nil {
		return ackReply{}, fmt.Errorf("record %s's acknowledged index: %w", rep.Node, err)
	}
	a.recs[rep.Node] = next
	return ackReply{Recorded: next.Index}, nil
}

// incarnation is the data dir's incarnation, made and stored on first use.
func incarnation(stable raft.StableStore) (string, error) {
	b, err := raftx.StableValue(stable, []byte(incarnationKey))
	if err != nil {
		return "", fmt.Errorf("read the data dir's incarnation: %w", err)
	}
	if len(b) > 0 {
		return string(b), nil
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", err
	}
	inc := hex.EncodeToString(id[:])
	if err := stable.Set([]byte(incarnationKey), []byte(inc)); err != nil {
		return "", fmt.Errorf("store the data dir's incarnation: %w", err)
	}
	return inc, nil
}

// serveAckReport answers a peer's report (rpcAckReport).
func (s *Server) serveAckReport(rep *ackReport) (any, error) {
	if err := api.ValidateIdentifier("node", rep.Node); err != nil {
		return nil, err
	}
	if rep.Incarnation == "" || len(rep.Incarnation) > 64 {
		return nil, fmt.Errorf("%w: incarnation of %d bytes", api.ErrInvalid, len(rep.Incarnation))
	}
	acks := s.acks.Load()
	if acks == nil {
		return nil, notApplied(api.CodeStarting, ErrStarting)
	}
	if !rep.Probe {
		// Recorded for good: only for the configuration's servers, so
		// that a peer cannot fill the stable store with made-up names.
		if !s.rpcReady.Load() {
			return nil, notApplied(api.CodeStarting, ErrStarting)
		}
		ok, err := s.inConfiguration(rep.Node)
		if err != nil {
			return nil, fmt.Errorf("%s: raft configuration: %w", rpcAckReport, err)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %q is not a server of this cluster's Raft configuration", api.ErrPermissionDenied, rep.Node)
		}
	}
	reply, err := acks.report(*rep)
	if err != nil {
		// A record that fails its checksum leaves its server unchecked
		// at start: say so here, where the record is.
		s.logger.Error("rollback check: the record of a server's acknowledged index cannot be used", "server", rep.Node, "error", err)
		return nil, err
	}
	return reply, nil
}

// inConfiguration reports whether node is a server of the Raft
// configuration.
func (s *Server) inConfiguration(node string) (bool, error) {
	servers, err := s.RaftConfiguration()
	if err != nil {
		return false, err
	}
	for _, srv := range servers {
		if srv.ID == raft.ServerID(node) {
			return true, nil
		}
	}
	return false, nil
}

// checkNotRolledBack asks the servers of the stored configuration whether
// this server's log reaches what they recorded for it; it refuses a data
// dir that went back. Peers that do not answer are
// passed over (said in a warning): it waits for them at most
// rollbackProbeWait, and rollbackProbeGrace past the first answer.
func (s *Server) checkNotRolledBack(inc string, stored raftx.StoredLog) error {
	last := stored.Last
	var peers []raft.Server
	for _, srv := range stored.Conf.Servers {
		if srv.ID != raft.ServerID(s.cfg.NodeID) {
			peers = append(peers, srv)
		}
	}
	if len(peers) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, rollbackProbeWait)
	defer cancel()
	type answer struct {
		peer  raft.ServerID
		reply ackReply
	}
	answers := make(chan answer, len(peers))
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var reply ackReply
				err := s.pool.Call(ctx, string(p.Address), rpcAckReport, &ackReport{Node: s.cfg.NodeID, Incarnation: inc, Index: last, Probe: true}, &reply)
				if err == nil || strings.Contains(err.Error(), "unknown rpc method") {
					// An older release keeps no records: no record.
					answers <- answer{p.ID, reply}
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(answers)
	}()
	var (
		answered []string
		grace    <-chan time.Time
	)
	for {
		select {
		case a, ok := <-answers:
			if !ok {
				return nil
			}
			if a.reply.RolledBack {
				return &StoreError{Path: s.cfg.DataDir, NodeID: s.cfg.NodeID, Err: fmt.Errorf(
					"the data dir went back: its log ends at entry %d, but this server had stored and applied entry %d (server %s's record): it was restored from an older copy (a VM snapshot, a disk backup), and it forgot votes and entries it acknowledged",
					last, a.reply.Recorded, a.peer)}
			}
			answered = append(answered, string(a.peer))
			if grace == nil {
				grace = time.After(rollbackProbeGrace)
			}
		case <-grace:
			s.logger.Warn("rollback check: not every server answered; starting on the answers of the others", "answered", answered, "servers", len(peers))
			return nil
		case <-ctx.Done():
			if s.ctx.Err() != nil {
				return s.ctx.Err()
			}
			s.logger.Warn("rollback check: no server answered; starting without it (a data dir restored from an older copy goes unnoticed)", "waited", rollbackProbeWait)
			return nil
		}
	}
}

// reportAcks tells every other server of the configuration, every
// ackReportInterval, how far this server stored and applied the log.
func (s *Server) reportAcks() {
	var last uint64 // the index last reported to every server
	s.every(ackReportInterval, func() bool {
		index := s.AppliedIndex()
		if index == 0 || index == last {
			return true
		}
		servers, err := s.RaftConfiguration()
		if err != nil {
			return true
		}
		ok := true
		for _, srv := range servers {
			if srv.ID == raft.ServerID(s.cfg.NodeID) {
				continue
			}
			ctx, cancel := context.WithTimeout(s.ctx, ackReportInterval)
			var reply ackReply
			err := s.pool.Call(ctx, string(srv.Address), rpcAckReport, &ackReport{Node: s.cfg.NodeID, Incarnation: s.incarnation, Index: index}, &reply)
			cancel()
			ok = ok && err == nil
		}
		if ok {
			last = index
		}
		return true
	})
}
