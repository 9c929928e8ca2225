package transport

import (
	"context"
	"net"
)

// Peer is who is at the other end of a connection to the server port, as
// the port proved it. Internal RPC handlers read it from their context
// (PeerFrom) to decide what the caller may do.
type Peer struct {
	// Server: the peer may act as a server of this cluster. With
	// VerifyIncoming and VerifyServerHostname it proved it (a certificate
	// that names the cluster's server name); without them the port asks
	// for no such proof, and every peer is taken for a server (plugreg
	// says so at start: docs/security.md).
	Server bool
}

// peerConn is an RPC connection with the peer the Mux proved for it.
type peerConn struct {
	net.Conn
	peer Peer
}

// connPeer returns the peer the Mux proved for conn; the zero Peer (not a
// server) for a connection that did not come through a Mux.
func connPeer(conn net.Conn) Peer {
	if pc, ok := conn.(*peerConn); ok {
		return pc.peer
	}
	return Peer{}
}

type peerKey struct{}

func withPeer(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// PeerFrom returns the peer of the RPC whose context ctx is; the zero Peer
// (not a server) outside one.
func PeerFrom(ctx context.Context) Peer {
	p, _ := ctx.Value(peerKey{}).(Peer)
	return p
}
