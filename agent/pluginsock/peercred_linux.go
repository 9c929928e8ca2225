//go:build linux

package pluginsock

import (
	"net"
	"syscall"
)

const peerCredSupported = true

var errPeerCredUnsupported error

// ucred is a unix socket peer's identity as the kernel recorded it when
// the peer called connect().
type ucred struct {
	uid, gid uint32
	pid      int32
}

// peerCred reads SO_PEERCRED of c (it does not block).
func peerCred(c *net.UnixConn) (ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return ucred{}, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return ucred{}, err
	}
	if serr != nil {
		return ucred{}, serr
	}
	return ucred{uid: cred.Uid, gid: cred.Gid, pid: cred.Pid}, nil
}
