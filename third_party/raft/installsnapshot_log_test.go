// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"fmt"
	"testing"
	"time"
)

// A deposed leader whose uncommitted suffix runs past the snapshot the new
// leader sends it must discard that suffix when it installs the snapshot
// (the Raft paper's InstallSnapshot rules 6 and 7) and catch up. Before,
// on a MonotonicLogStore the log was emptied but lastLog kept pointing at
// the suffix (issue 697); on any other store the conflicting suffix was
// kept. Either way every AppendEntries failed ("failed to get previous
// log") and the leader sent the same snapshot again, for good.
func TestRaft_InstallSnapshotDropsConflictingSuffix(t *testing.T) {
	for _, monotonic := range []bool{false, true} {
		t.Run(fmt.Sprintf("monotonic=%v", monotonic), func(t *testing.T) {
			conf := inmemConfig(t)
			conf.TrailingLogs = 5
			conf.SnapshotThreshold = 1 << 40 // snapshots on demand only
			conf.SnapshotInterval = time.Hour
			// A longstop past the in-memory transport's 5 s snapshot RPC timeout: a
			// leader may be sending one to a peer already shut down when Close
			// waits for it.
			c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: conf, MonotonicLogs: monotonic, LongstopTimeout: 15 * time.Second})
			defer c.Close()

			old := c.Leader()
			applyAll(t, old, "committed", 10)
			c.WaitForReplication(10)
			parted, _ := old.getLastLog()

			// Cut off, the old leader appends a suffix nobody else gets.
			c.Disconnect(old.localAddr)
			for i := 0; i < 100; i++ {
				old.Apply([]byte(fmt.Sprintf("lost %d", i)), 0)
			}
			waitFor(t, "the old leader to step down", func() bool { return old.State() != Leader })
			suffix, _ := old.getLastLog()

			// The others elect a leader that commits fewer entries than the
			// suffix holds, snapshots and compacts past where the logs part.
			var leader *Raft
			waitFor(t, "a new leader", func() bool {
				for _, r := range c.rafts {
					if r != old && r.State() == Leader {
						leader = r
						return true
					}
				}
				return false
			})
			applyAll(t, leader, "new", 20)
			if err := leader.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
			first, _ := leader.logs.FirstIndex()
			snap, _ := leader.getLastSnapshot()
			if first <= parted || suffix <= snap {
				t.Fatalf("setup: the logs part at %d, the leader's log starts at %d, its snapshot is at %d and the old leader's suffix ends at %d: want the suffix past the snapshot and the log compacted past the parting", parted, first, snap, suffix)
			}

			c.FullyConnect()
			c.EnsureSame(t)
			applyAll(t, leader, "after", 1)
			c.EnsureSame(t)
			if last, _ := old.getLastLog(); last >= suffix && old.getCommitIndex() < suffix {
				t.Fatalf("the old leader's last log is %d with commit index %d: its suffix survived", last, old.getCommitIndex())
			}
		})
	}
}

// A server's log may start right after its own snapshot: compactLogs
// keeps TrailingLogs back from the head, so a long uncommitted suffix lets
// it remove everything up to the snapshot. When that suffix conflicts with
// the new leader's log, the leader finds the match at or below the
// snapshot's index, which the follower must take as matching (entries in
// a snapshot are committed) instead of looking for them in its log.
// Before, it refused every AppendEntries ("failed to get previous log",
// "failed to get log entry"), and a leader that had not compacted past
// that index never sent a snapshot instead: stuck for good.
func TestRaft_PreviousEntryMatchesTheSnapshot(t *testing.T) {
	for _, monotonic := range []bool{false, true} {
		t.Run(fmt.Sprintf("monotonic=%v", monotonic), func(t *testing.T) {
			conf := inmemConfig(t)
			conf.TrailingLogs = 5
			conf.SnapshotThreshold = 1 << 40
			conf.SnapshotInterval = time.Hour
			// A longstop past the in-memory transport's 5 s snapshot RPC timeout: a
			// leader may be sending one to a peer already shut down when Close
			// waits for it.
			c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: conf, MonotonicLogs: monotonic, LongstopTimeout: 15 * time.Second})
			defer c.Close()

			old := c.Leader()
			applyAll(t, old, "committed", 10)
			c.WaitForReplication(10)
			c.Disconnect(old.localAddr)
			for i := 0; i < 100; i++ {
				old.Apply([]byte(fmt.Sprintf("lost %d", i)), 0)
			}
			waitFor(t, "the old leader to step down", func() bool { return old.State() != Leader })
			if err := old.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
			snap, _ := old.getLastSnapshot()
			if first, _ := old.logs.FirstIndex(); first != snap+1 {
				t.Fatalf("setup: the old leader's snapshot is at %d and its log starts at %d; want it right after", snap, first)
			}

			var leader *Raft
			waitFor(t, "a new leader", func() bool {
				for _, r := range c.rafts {
					if r != old && r.State() == Leader {
						leader = r
						return true
					}
				}
				return false
			})
			applyAll(t, leader, "new", 20)
			c.FullyConnect()
			c.EnsureSame(t)
		})
	}
}

func applyAll(t *testing.T, r *Raft, prefix string, n int) {
	t.Helper()
	var f ApplyFuture
	for i := 0; i < n; i++ {
		f = r.Apply([]byte(fmt.Sprintf("%s %d", prefix, i)), time.Second)
	}
	if err := f.Error(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
