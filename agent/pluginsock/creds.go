package pluginsock

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// peerCreds are the socket's gRPC transport credentials: no handshake on
// the wire (plugins connect with insecure credentials, as over any unix
// socket), only the kernel's record of who connected (SO_PEERCRED) kept
// as the connection's AuthInfo, so that a session knows its user.
type peerCreds struct{}

// peerInfo is a connection's peer as the kernel saw it at connect(); ok is
// false where that cannot be read (not Linux, not a unix socket).
type peerInfo struct {
	credentials.CommonAuthInfo
	cred ucred
	ok   bool
}

func (peerInfo) AuthType() string { return "peercred" }

func (peerCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info := peerInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
	if uc, ok := c.(*net.UnixConn); ok {
		if cred, err := peerCred(uc); err == nil {
			info.cred, info.ok = cred, true
		}
	}
	return c, info, nil
}

func (peerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("pluginsock: server-side credentials only")
}

func (peerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (peerCreds) Clone() credentials.TransportCredentials { return peerCreds{} }

func (peerCreds) OverrideServerName(string) error { return nil }

// uidOf is the uid of the process at the other end of a session's
// connection, and whether it is known.
func uidOf(ctx context.Context) (uint32, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return 0, false
	}
	info, ok := p.AuthInfo.(peerInfo)
	if !ok || !info.ok {
		return 0, false
	}
	return info.cred.uid, true
}
