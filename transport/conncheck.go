package transport

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// errUnexpectedData: an idle RPC connection had bytes to read.
var errUnexpectedData = errors.New("transport: unexpected data on an idle connection")

// checkIdle tells whether an idle connection is still open at the other end,
// without waiting: a peek that would block means open and quiet (good), end
// of stream or an error means the peer closed or reset it, and data means
// the protocol is out of step. (A read deadline in the past cannot do this:
// Go reports the timeout without looking at the socket.)
func checkIdle(c net.Conn) error {
	if tc, ok := c.(*tls.Conn); ok {
		// The socket under TLS: the servers send nothing unasked (no
		// session tickets), so bytes there are as wrong as in plaintext.
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil // cannot tell; use it
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var (
		n    int
		rerr error
		buf  [1]byte
	)
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for readiness
	})
	switch {
	case err != nil:
		return err
	case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK):
		return nil
	case rerr != nil:
		return rerr
	case n == 0:
		return errors.New("transport: peer closed the connection")
	default:
		return errUnexpectedData
	}
}
