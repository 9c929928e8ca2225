// Package cluster runs one plugreg server node: Raft over raft-wal (or
// raft-boltdb/v2, for a data dir that holds one) behind raft.LogCache,
// with a FileSnapshotStore under the data dir, memberlist for discovery,
// bootstrap with -bootstrap-expect, the leader's duties (reconcile
// memberlist with the Raft configuration, remove servers that left, reap
// plugins of dead nodes, keep the leases of registrations with a TTL and
// expire those that run out: lessor.go, leases.go), write forwarding to
// the leader, and read-index reads on any node.
//
// Writes are built into commands in write.go and committed, every one of
// them, by commit in propose.go (encoded once, proposed on the leader or
// forwarded, waited for here in read.go's waitFSMEntry); events reach
// subscribers through the node's watch hub (package
// registry). Reads go through Server.Read, which applies the requested
// consistency and then returns this node's state.
//
// Caller's duties: build a Config (DefaultConfig, then set fields), call
// New, and call Leave or Shutdown at the end. Shutdown is idempotent and
// waits for every goroutine the Server started.
package cluster
