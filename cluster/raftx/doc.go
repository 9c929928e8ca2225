// Package raftx holds plugreg's workarounds for hashicorp/raft and
// hashicorp/raft-wal, each with the upstream issue it waits on, so that
// the day upstream fixes one, removing it is one commit here and one line
// where cluster wires it:
//
//   - HeartbeatsInOrder: raft's heartbeat fast path off (hashicorp/raft
//     issue 695: a deposed leader stamped entries with the new term).
//     Wired in cluster/server.go (setupRaft).
//   - CommitNotifier (Watch): followers told the commit index as soon as
//     the leader applied an entry (hashicorp/raft issues 28 and 282).
//     Wired in cluster/server.go (setupRaft).
//   - Await: a wait on a future that gives up once raft has stopped
//     (hashicorp/raft issue 498: futures never answered at shutdown).
//     Used by cluster/propose.go (applyOutcome) and cluster/leader.go (the
//     leader's barrier); internal/testing/testcluster/leak.go allows its
//     goroutine.
//   - NoPipelining: pipelined replication off (hashicorp/raft issue 612:
//     a pipeline parked a follower's replication for good). Wired in
//     cluster/server.go (setupRaft, the transport's MaxRPCsInFlight).
//   - WALStore (OpenWAL): raft-wal reopened from disk after a failed
//     write (raft-wal v0.4.2 cannot append again after a write failed for
//     want of room; not reported upstream as far as searched) and its
//     meta store closed by plugreg (v0.4.2's Open leaves it open when it
//     fails). Opened by cluster/logstore.go (openStores) and
//     cluster/inspect.go.
//
// Fixed inside raft instead (third_party/raft, a patched copy that go.mod
// replaces hashicorp/raft with, because nothing outside raft can set its
// last log index): issue 697 and a follower matching the previous entry
// against its snapshot (third_party/raft/PATCHES.md).
//
// Each one's whole-cluster tests stay in package cluster (and
// cmd/plugreg), where it is wired: TestShutdownRightAfterElection (498),
// TestReplicationIsNotPipelined (612), commitnotify_test.go (28/282); the
// raft patch's are in installsnapshot_test.go and cmd/plugreg's
// deposed_test.go.
package raftx
