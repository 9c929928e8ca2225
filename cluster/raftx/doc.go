// Package raftx holds plugreg's workarounds for hashicorp/raft, each with
// the upstream issue it waits on, so that the day upstream fixes one,
// removing it is one commit here and one line where cluster wires it:
//
//   - HeartbeatsInOrder: raft's heartbeat fast path off (hashicorp/raft
//     issue 695: a deposed leader stamped entries with the new term).
//     Wired in cluster/server.go (setupRaft).
//   - CommitNotifier (Watch): followers told the commit index as soon as
//     the leader applied an entry (hashicorp/raft issues 28 and 282).
//     Wired in cluster/server.go (setupRaft).
//   - Await: a wait on a future that gives up once raft has stopped
//     (hashicorp/raft issue 498: futures never answered at shutdown).
//     Used by cluster/apply.go (applyOutcome) and cluster/leader.go (the
//     leader's barrier); internal/testing/testcluster/leak.go allows its
//     goroutine.
//   - NoPipelining: pipelined replication off (hashicorp/raft issue 612:
//     a pipeline parked a follower's replication for good). Wired in
//     cluster/server.go (setupRaft, the transport's MaxRPCsInFlight).
//
// Still in package cluster: the stale-last-log watch (issue 697,
// stalelog.go) and the raft-wal reopen after a failed write
// (walstore.go).
package raftx
