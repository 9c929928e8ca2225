package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/verifier"

	"github.com/plugreg/plugreg/cluster/raftx"
	"github.com/plugreg/plugreg/fsm"
)

// Cross-replica log verification, with raft-wal's verifier (what Consul
// runs): the leader appends a log checkpoint every LogVerifyInterval
// (fsm.LogCheckpointCommand, which changes nothing); as it stores one,
// the leader's verifier writes into it a checksum of the entries since the
// previous checkpoint, and each server that stores it reads those entries
// back from its own log and compares. A mismatch means this server's log
// is not the leader's although every entry passed its own checksum
// (raftx.ChecksumStore): a store bug, a disk that returned another
// block, a data dir put together from pieces.

// verifyLogs wraps logs in the verifier; Close stops its goroutine.
func verifyLogs(logs raft.LogStore, nodeID string, logger hclog.Logger) *verifier.LogStore {
	return verifier.NewLogStore(logs, isLogCheckpoint, reportVerification(logger),
		verifierMetrics{labels: []metrics.Label{{Name: "node", Value: nodeID}}})
}

func isLogCheckpoint(l *raft.Log) (bool, error) {
	return l.Type == raft.LogCommand && fsm.IsLogCheckpoint(l.Data), nil
}

// reportVerification logs each verifier's report: a mismatch as an
// error, a range this server no longer holds (compacted, or it started
// since) as a note.
func reportVerification(logger hclog.Logger) verifier.ReportFn {
	return func(r verifier.VerificationReport) {
		var mismatch verifier.ErrChecksumMismatch
		switch {
		case r.Err == nil:
			logger.Debug("log verified against the leader's", "range", r.Range.String(), "elapsed", r.Elapsed)
		case errors.Is(r.Err, verifier.ErrRangeMismatch):
			logger.Debug("log verification skipped: this server does not hold the whole range", "range", r.Range.String())
		case errors.As(r.Err, &mismatch):
			logger.Error("this server's log differs from the leader's: its data dir is damaged; replace it (docs/operations.md, A server that cannot open its data dir)", "range", r.Range.String(), "error", r.Err)
		default:
			logger.Error("log verification could not read the log", "range", r.Range.String(), "error", r.Err)
		}
	}
}

// verifierMetrics names the verifier's counters
// plugreg_raft_logstore_verifier_NAME_total (checkpoints_written,
// ranges_verified, read_checksum_failures, write_checksum_failures,
// dropped_reports), by node.
type verifierMetrics struct{ labels []metrics.Label }

func (m verifierMetrics) IncrementCounter(name string, delta uint64) {
	metrics.IncrCounterWithLabels([]string{"raft", "logstore", "verifier", name}, float32(delta), m.labels)
}

func (m verifierMetrics) SetGauge(name string, val uint64) {
	metrics.SetGaugeWithLabels([]string{"raft", "logstore", "verifier", name}, float32(val), m.labels)
}

// startLogCheckpoints appends a log checkpoint every LogVerifyInterval
// while this server leads; end stops it.
func (s *Server) startLogCheckpoints(stop <-chan struct{}) (end func()) {
	if s.cfg.LogVerifyInterval < 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.cfg.LogVerifyInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-done:
				return
			case <-t.C:
				if err := s.appendLogCheckpoint(); err != nil {
					s.logger.Warn("log checkpoint not appended", "error", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// appendLogCheckpoint appends a log checkpoint and waits for it to apply.
func (s *Server) appendLogCheckpoint() error {
	cmd, err := fsm.EncodeCommand(&fsm.LogCheckpointRequest{})
	if err != nil {
		return err
	}
	return raftx.Await(s.raft.Apply(cmd, s.cfg.ApplyTimeout), s.raftGone)
}
