package raftx

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Shutdown shuts r down within two waits and reports whether its
// goroutines all ended. raft.Shutdown can wait forever: on a replication
// goroutine parked by a pipeline (hashicorp/raft issue 612, open), on a
// future nobody answers (issue 498, open), on a peer that stopped reading.
// After the first wait closeConns closes every connection under raft (its
// goroutines wait on the network); after the second, raft's goroutines
// are abandoned: Shutdown logs it and returns false, and the caller must
// leave open what they use (the stores) and end the process.
func Shutdown(r *raft.Raft, wait time.Duration, closeConns func(), logger hclog.Logger) (bool, error) {
	done := make(chan error, 1)
	f := r.Shutdown()
	// This goroutine ends when raft does; it outlives Shutdown only in
	// the abandoned case, which ends the process anyway.
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(wait):
	}
	logger.Warn("raft did not stop in time; closing its connections", "waited", wait)
	closeConns()
	select {
	case err := <-done:
		return true, err
	case <-time.After(wait):
	}
	logger.Error("abandoning raft shutdown: its goroutines are still running and the log store is left open; the data dir is consistent (raft syncs every write)", "waited", 2*wait)
	return false, nil
}
