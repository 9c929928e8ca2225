// Package transport owns bytes on the wire between servers: one TCP port
// per node that carries both Raft (hashicorp/raft's NetworkTransport over
// our RaftLayer, which cluster adapts to raft.StreamLayer) and plugreg's
// internal RPC, told apart by the first byte of each connection, and a
// pooled RPC client for the second. It does not import raft: client
// agents use its RPC.
//
// RPC is request/reply (Pool.Call over pooled connections), or a stream:
// a handler that returns a Streamer answers a Pool.Stream call with one
// frame per value and an end frame carrying the streamer's error, on a
// connection of its own that is closed afterwards. The streamer's context
// ends when the caller closes the stream or goes away, and on shutdown;
// each write has a deadline (ServeOptions.StreamWriteTimeout), so a
// caller that stops reading cannot pin it. A stream has no idle timeout:
// a caller that must notice a silent peer (a host that vanished without a
// FIN) asks for heartbeats and closes a stream that stalls.
//
// A handler's error crosses as api.ToWire makes it (an RPC's status and a
// stream's end carry the api.WireError inline), and comes back to the
// caller as that *api.WireError; CallError turns any failure of a call
// into the api error it stands for.
//
// Outgoing connections bind the node's own address, so nodes on 127.0.0.1,
// .2 and .3 are distinct hosts to each other and to packet filters.
//
// TLS is in one place: Mux.accept and Dialer.dial are the only places a
// net.Conn is created, and both wrap it with crypto/tls when the node's
// tlsutil.Configurator says so (a protocol byte goes before the
// handshake). The mux hands every RPC its peer as the handshake proved it
// (Peer: whether it holds the server identity), so that server-only
// methods can refuse a client agent's certificate before reading a byte
// of their arguments.
//
// Caller's duties: call Mux.Close and Pool.Close on shutdown; both wait for
// the goroutines they own (Pool.Close also closes its open streams). Close
// every Stream you open (or cancel its ctx).
package transport
