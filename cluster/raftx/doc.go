// Package raftx holds plugreg's workarounds for hashicorp/raft, each with
// the upstream issue it waits on, so that the day upstream fixes one,
// removing it is one commit here and one line where cluster wires it:
//
//   - HeartbeatsInOrder: raft's heartbeat fast path off (hashicorp/raft
//     issue 695: a deposed leader stamped entries with the new term).
//   - CommitNotifier (Watch): followers told the commit index as soon as
//     the leader applied an entry (hashicorp/raft issues 28 and 282).
//
// Still in package cluster, for they need the server's own state:
// awaitFuture (issue 498: futures that never resolve at shutdown), the
// stale-last-log watch (issue 697, stalelog.go), pipelining off (issue
// 612, config.go) and the raft-wal reopen after a failed write
// (logstore.go).
package raftx
