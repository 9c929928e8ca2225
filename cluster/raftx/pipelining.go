package raftx

// NoPipelining is the raft.NetworkTransportConfig.MaxRPCsInFlight that
// turns pipelined replication off. In raft v1.7.3, when a follower
// answers a pipelined AppendEntries with Success=false (normal after a
// restart or a leader change), the decoder returns while the sender is
// parked on the pipeline's unbuffered in-flight channel, and the deferred
// pipeline.Close never runs: the follower gets heartbeats but no entries,
// for good, and raft.Shutdown waits on that goroutine forever
// (hashicorp/raft issue 612, open; v1.8.0 unchanged). With one RPC in
// flight the transport refuses pipelines, and raft replicates with plain
// request/response AppendEntries.
const NoPipelining = 1
