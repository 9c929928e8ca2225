//go:build !linux

package pluginsock

import (
	"errors"
	"net"
	"runtime"
)

const peerCredSupported = false

var errPeerCredUnsupported = errors.New("peer credentials (SO_PEERCRED) are not supported on " + runtime.GOOS)

type ucred struct {
	uid, gid uint32
	pid      int32
}

func peerCred(*net.UnixConn) (ucred, error) { return ucred{}, errPeerCredUnsupported }
