// Package gossip is plugreg's membership: a memberlist pool in which every
// agent, server or client, gossips its node meta (ID, role, server and HTTP
// addresses). A Pool keeps every member it has heard of, including failed
// and departed ones (memberlist forgets them), with the time of the last
// change, so that the Raft leader can act on how long a node has been gone
// (dead-server cleanup, node reaping) and client agents can find servers.
// It forgets a client agent gone for longer than Config.ForgetAfter (once
// Config.Keep lets it: a server keeps a node until it is reaped), so that
// a fleet whose hosts come and go does not grow it for ever; servers are
// never forgotten.
//
// Caller's duties: Start, Join (or rejoin from the peers file), read
// Members or wait on Changed, and Leave or Shutdown on the way out. Pool
// has no Raft dependency: client agents use it.
package gossip
