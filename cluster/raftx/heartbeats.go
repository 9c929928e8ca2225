package raftx

import "github.com/hashicorp/raft"

// HeartbeatsInOrder is raft's network transport without its heartbeat fast
// path: raft hands a heartbeat to a handler that runs on the transport's
// connection goroutine, and when the heartbeat carries a newer term it
// raises the node's term and makes it a follower there, unsynchronised
// with the leader loop. A leader deposed that way can still stamp the
// entries it is dispatching with the new term: its log then holds, at
// the same index and term, other entries than the real leader's, the log
// matching check passes, and it applies them (hashicorp/raft issue 695,
// open; PR 701 open; v1.8.0 unchanged). The fault suite saw exactly that
// (seed 106: a leader resumed after SIGSTOP applied three
// writes at 266-268 in term 4 that the leader of term 4 never had). With
// no handler set, the transport delivers heartbeats to raft's main loop
// like every other AppendEntries, in order with the leader loop's work;
// the price is that a heartbeat waits behind the follower's disk writes.
type HeartbeatsInOrder struct{ *raft.NetworkTransport }

// SetHeartbeatHandler refuses the fast path (see HeartbeatsInOrder).
func (HeartbeatsInOrder) SetHeartbeatHandler(func(raft.RPC)) {}
