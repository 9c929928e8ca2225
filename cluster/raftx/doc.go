// Package raftx holds plugreg's workarounds for hashicorp/raft and
// hashicorp/raft-wal, each with the upstream issue it waits on, so that
// the day upstream fixes one, removing it is one commit here and one line
// where cluster wires it:
//
//   - HeartbeatsInOrder: raft's heartbeat fast path off (hashicorp/raft
//     issue 695: a deposed leader stamped entries with the new term).
//     Wired in cluster/server.go (setupRaft).
//   - CommitNotifier (Watch, AppliedUpTo): followers told the commit
//     index as soon as the leader applied an entry (hashicorp/raft issues
//     28 and 282). Wired in cluster/server.go (setupRaft) and told what
//     was applied by cluster/machine.go.
//   - Await: a wait on a future that gives up once raft has stopped
//     (hashicorp/raft issue 498: futures never answered at shutdown).
//     Used by cluster/propose.go (applyOutcome) and cluster/leader.go (the
//     leader's barrier); tests/framework/testcluster/leak.go allows its
//     goroutine.
//   - NoPipelining: pipelined replication off (hashicorp/raft issue 612:
//     a pipeline parked a follower's replication for good). Wired in
//     cluster/server.go (setupRaft, the transport's MaxRPCsInFlight).
//   - Shutdown: raft's Shutdown bounded, the connections closed under it
//     and its goroutines abandoned past a second wait (hashicorp/raft
//     issues 612 and 498: Shutdown waits forever on a parked pipeline or
//     an unanswered future). Used by cluster/server.go (stopRaft).
//   - SnapshotStore (OpenSnapshotStore): raft's FileSnapshotStore with the
//     fsync of a new snapshot's own dir (issue 229, closed, synced only
//     the files), the dir of a failed Create removed, and the *.tmp dirs
//     raft never removes removed at open (neither reported upstream as
//     far as searched). Opened by cluster/server.go (setupRaft).
//   - CheckSnapshots: a data dir refused whose snapshots raft would pass
//     over without a word (a newer snapshot whose meta.json cannot be
//     read, a newest whose state.bin fails its CRC: raft restores an older
//     one). Not reported upstream as far as searched. Used by
//     cluster/server.go (setupRaft), which makes a refusal a StoreError;
//     NewerSnapshot, raft's order of snapshots, by cluster/inspect.go.
//   - CheckLog, NewRaftNoPanic: what raft.NewRaft would panic on (an entry
//     it cannot read, "failed to get log"; cf. issue 85, open) or pass
//     over (a gap between the newest snapshot and the log) found first,
//     and a panic at start returned as an error. Used by
//     cluster/server.go (setupRaft), which makes each a StoreError.
//   - ChecksumStore, ChecksumStableStore: a CRC-32C on every log entry and
//     stable value, which neither raft-wal nor bbolt checks. Opened by
//     cluster/logstore.go (openStores).
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
// Each one's own tests are here; its whole-cluster tests stay in package
// cluster (and tests/e2e, on processes), where it is wired:
// TestShutdownRightAfterElection (498),
// TestReplicationIsNotPipelined (612), commitnotify_test.go (28/282); the
// raft patch's are in installsnapshot_test.go and tests/e2e's
// deposed_test.go; CheckLog's in tests/e2e's store_test.go
// (TestDamagedStoreExitsWithOneLine).
package raftx
