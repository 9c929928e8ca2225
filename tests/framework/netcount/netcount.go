// Package netcount counts the bytes a server reads from its connections,
// for tests that prove a refusal came before a request's body was read.
package netcount

import (
	"net"
	"sync/atomic"
)

// Listener is a net.Listener whose accepted connections count what their
// readers take from the network.
type Listener struct {
	net.Listener
	read atomic.Int64
}

// Wrap counts what is read from ln's connections.
func Wrap(ln net.Listener) *Listener { return &Listener{Listener: ln} }

// Read is the number of bytes read so far from every accepted connection.
func (l *Listener) Read() int64 { return l.read.Load() }

// Reset starts the count again from zero.
func (l *Listener) Reset() { l.read.Store(0) }

func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, read: &l.read}, nil
}

type conn struct {
	net.Conn
	read *atomic.Int64
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}
