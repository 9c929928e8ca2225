package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/tlsutil"
)

// The first byte of every connection to the server port. protoTLS is
// followed by a TLS handshake, and inside TLS by one of the others.
const (
	protoRaft byte = 0x01
	protoRPC  byte = 0x02
	protoTLS  byte = 0x03
)

// handshakeTimeout bounds the first byte and the TLS handshake of an
// incoming connection, and the handshake of an outgoing one past its
// dial timeout: a peer that connects and says nothing cannot pin a
// goroutine.
const handshakeTimeout = 5 * time.Second

// ErrClosed is returned by Accept and Dial after Close.
var ErrClosed = errors.New("transport: closed")

// ConnHandler serves one RPC connection until it ends. The Mux closes the
// connection when the handler returns and on Close.
type ConnHandler func(net.Conn)

// Mux listens on the server port and hands each connection to Raft or to
// the RPC handler by its first byte.
type Mux struct {
	ln     net.Listener
	dialer *Dialer
	rpc    ConnHandler
	logger hclog.Logger
	raftCh chan net.Conn
	tls    *tlsutil.Configurator // nil: plaintext only

	mu     sync.Mutex // guards conns, closed
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup // accept loop and per-connection goroutines
}

// Listen opens the server port on addr ("127.0.0.2:7300") and serves it.
// With tlsc (nil: plaintext), the port accepts TLS connections, refuses
// plaintext ones when tlsc requires TLS (VerifyIncoming), and Raft
// connections it dials use TLS when tlsc says outgoing connections do.
func Listen(addr string, rpc ConnHandler, logger hclog.Logger, tlsc *tlsutil.Configurator) (*Mux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on server port %s: %w", addr, err)
	}
	return serveMux(ln, rpc, logger, tlsc), nil
}

// serveMux serves the server port on ln.
func serveMux(ln net.Listener, rpc ConnHandler, logger hclog.Logger, tlsc *tlsutil.Configurator) *Mux {
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	m := &Mux{
		ln:     ln,
		dialer: NewDialer(host, tlsc),
		rpc:    rpc,
		logger: logger,
		tls:    tlsc,
		raftCh: make(chan net.Conn),
		conns:  make(map[net.Conn]struct{}),
		done:   make(chan struct{}),
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

// Addr is the address the Mux listens on.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			m.logger.Warn("accept failed", "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !m.track(conn) {
			conn.Close()
			return
		}
		m.wg.Add(1)
		go m.handle(conn)
	}
}

func (m *Mux) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *Mux) untrack(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, c)
}

func (m *Mux) handle(conn net.Conn) {
	defer m.wg.Done()
	proto, wrapped, err := m.open(conn)
	if errors.Is(err, errClosedUnused) {
		// A dial given up (a client agent's timeout while the server's
		// accept queue is long, as in a fleet's start storm), not a
		// refusal: at a fleet's scale a warning each is thousands.
		m.logger.Debug("connection closed before its first byte", "from", conn.RemoteAddr())
		m.untrack(conn)
		conn.Close()
		return
	}
	if err != nil {
		select {
		case <-m.done:
			// This server's shutdown closed it, silent so far.
			m.logger.Debug("connection closed at shutdown before its first byte", "from", conn.RemoteAddr())
		default:
			m.logger.Warn("connection refused", "from", conn.RemoteAddr(), "error", err)
		}
		m.untrack(conn)
		conn.Close()
		return
	}
	if wrapped != conn {
		// Track the TLS conn in place of the raw one, so that Close
		// closes what the handlers hold.
		m.untrack(conn)
		if !m.track(wrapped) {
			wrapped.Close()
			return
		}
		conn = wrapped
	}
	b := [1]byte{proto}
	switch b[0] {
	case protoRaft:
		// Raft's transport owns the connection from here on, but does not
		// close it on shutdown (it waits for the peer to); the Mux keeps
		// tracking it so that Close ends it and raft's reader goroutine.
		select {
		case m.raftCh <- &trackedConn{Conn: conn, m: m}:
		case <-m.done:
			m.untrack(conn)
			conn.Close()
		}
	case protoRPC:
		m.rpc(&peerConn{Conn: conn, peer: m.peerOf(conn)})
		m.untrack(conn)
		conn.Close()
	default:
		m.logger.Warn("unknown protocol byte", "byte", b[0], "from", conn.RemoteAddr())
		m.untrack(conn)
		conn.Close()
	}
}

// errClosedUnused: the peer closed the connection before its first byte.
var errClosedUnused = errors.New("closed by the peer before its first byte")

// open reads a connection's first byte and, for TLS, makes the handshake
// and reads the protocol byte inside it. It refuses plaintext when TLS is
// required, and Raft from a peer that is not a server of this cluster.
func (m *Mux) open(conn net.Conn) (byte, net.Conn, error) {
	conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	defer conn.SetReadDeadline(time.Time{})
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, errClosedUnused
		}
		return 0, nil, fmt.Errorf("first byte: %w", err)
	}
	if b[0] != protoTLS {
		if m.tls.RequiresTLS() && (b[0] == protoRaft || b[0] == protoRPC) {
			return 0, nil, errors.New("plaintext connection, and -verify-incoming requires TLS")
		}
		return b[0], conn, nil
	}
	if !m.tls.ServesTLS() {
		return 0, nil, errors.New("TLS connection, and this node has no certificate (-tls-cert-file)")
	}
	tc := tls.Server(conn, m.tls.IncomingConfig())
	tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return 0, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		return 0, nil, fmt.Errorf("protocol byte inside TLS: %w", err)
	}
	tc.SetDeadline(time.Time{})
	if b[0] == protoRaft {
		// Raft itself: servers only.
		if err := m.tls.VerifyServerPeer(tc.ConnectionState()); err != nil {
			return 0, nil, err
		}
	}
	return b[0], tc, nil
}

// peerOf proves what it can of an accepted connection's peer: whether it
// may act as a server. A
// plaintext connection reached here only because TLS is not required:
// nothing is proven, and the port takes it for a server, as it always
// has (docs/security.md says so).
func (m *Mux) peerOf(conn net.Conn) Peer {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return Peer{Server: true}
	}
	return Peer{Server: m.tls.VerifyServerPeer(tc.ConnectionState()) == nil}
}

// Close stops listening, closes every RPC connection, and waits for the
// Mux's goroutines. Idempotent.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	for c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	err := m.ln.Close()
	m.wg.Wait()
	return err
}

// RaftLayer returns this port's Raft side. cluster adapts it to
// raft.StreamLayer (whose Dial takes a raft.ServerAddress): transport does
// not import raft, so client agents, which use its RPC, do not either.
func (m *Mux) RaftLayer() *RaftLayer { return &RaftLayer{m: m} }

// RaftLayer is a net.Listener of the Raft connections to this port and a
// dialer of Raft connections to others.
type RaftLayer struct{ m *Mux }

// Accept returns the next Raft connection.
func (s *RaftLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.m.raftCh:
		return c, nil
	case <-s.m.done:
		return nil, ErrClosed
	}
}

// Close is called by raft's transport on shutdown; the Mux owns the
// listener and closes it in Mux.Close.
func (s *RaftLayer) Close() error { return nil }

// Addr is the port's address.
func (s *RaftLayer) Addr() net.Addr { return s.m.ln.Addr() }

// DialRaft opens a Raft connection to the server port at addr.
func (s *RaftLayer) DialRaft(addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := s.m.dialer.dial(addr, protoRaft, timeout)
	if err != nil {
		return nil, err
	}
	// Raft pools outgoing connections and never closes them on shutdown:
	// track them so Mux.Close does.
	if !s.m.track(conn) {
		conn.Close()
		return nil, ErrClosed
	}
	return &trackedConn{Conn: conn, m: s.m}, nil
}

// trackedConn is a connection handed to raft that the Mux closes on Close.
type trackedConn struct {
	net.Conn
	m    *Mux
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.m.untrack(c.Conn) })
	return c.Conn.Close()
}

// Dialer opens connections to server ports from a fixed local address,
// over TLS when its Configurator says outgoing connections use it.
type Dialer struct {
	bind net.IP
	tls  *tlsutil.Configurator // nil: plaintext
}

// NewDialer returns a Dialer whose connections come from bindIP ("" or an
// unspecified address lets the kernel choose) and use TLS when
// tlsc.DialsTLS (a nil tlsc: plaintext).
func NewDialer(bindIP string, tlsc *tlsutil.Configurator) *Dialer {
	ip := net.ParseIP(bindIP)
	if ip != nil && ip.IsUnspecified() {
		ip = nil
	}
	return &Dialer{bind: ip, tls: tlsc}
}

func (d *Dialer) dial(addr string, proto byte, timeout time.Duration) (net.Conn, error) {
	nd := net.Dialer{Timeout: timeout}
	if d.bind != nil {
		nd.LocalAddr = &net.TCPAddr{IP: d.bind}
	}
	conn, err := nd.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(max(timeout, handshakeTimeout)))
	if d.tls.DialsTLS() {
		if _, err := conn.Write([]byte{protoTLS}); err != nil {
			conn.Close()
			return nil, err
		}
		tc := tls.Client(conn, d.tls.OutgoingConfig())
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		conn = tc
	}
	if _, err := conn.Write([]byte{proto}); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}
