// Package transport owns bytes on the wire between servers: one TCP port
// per node that carries both Raft (hashicorp/raft's NetworkTransport over
// our StreamLayer) and plugreg's internal RPC, told apart by the first byte
// of each connection, and a pooled RPC client for the second.
//
// Outgoing connections bind the node's own address, so nodes on 127.0.0.1,
// .2 and .3 are distinct hosts to each other and to packet filters.
//
// TLS goes in one place when it comes: Mux.accept and Dialer.dial are the
// only places a net.Conn is created; wrapping both with crypto/tls (and
// checking the peer) covers Raft and RPC alike.
//
// Caller's duties: call Mux.Close and Pool.Close on shutdown; both wait for
// the goroutines they own.
package transport
