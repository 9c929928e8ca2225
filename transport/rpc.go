package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tlsutil"
	"github.com/plugreg/plugreg/tracing"
)

// maxInitLen is the most a length prefix makes the decoder allocate before
// the data is there: a hostile prefix cannot allocate gigabytes, and a
// request's bound (ServeOptions.MaxRequestBytes) caps what data can follow.
// go-msgpack v2 grows a longer byte slice by this much at a time, copying
// it each time: at 4 KiB a 32 MiB slice took 38 s to decode (quadratic);
// at 1 MiB, 64 MiB takes about a second.
const maxInitLen = 1 << 20

var msgpackHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{WriteExt: true}
	h.MaxInitLen = maxInitLen
	return h
}()

// ErrUnreachable means the request was never sent: the peer could not be
// dialled. The caller may retry it anywhere without risk of a double apply.
var ErrUnreachable = errors.New("transport: peer unreachable; request not sent")

// CallError is err, a failure of Pool.Call or Pool.Stream (or a stream's
// end), as an api error: the handler's error rebuilt from the *api.WireError
// it sent (its sentinel, or its code and outcome); ErrUnreachable as code
// unreachable, not applied (nothing was sent); the context's end as a
// timeout and any other failure (the connection broke after the request
// went out) as forward_failed, both of unknown outcome. The caller names
// the code of an unreachable peer: what it means depends on whom it
// dialled (a leader: no_leader; any server: no_server).
func CallError(err error, unreachable string) error {
	var w *api.WireError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &w):
		return w.Err()
	case errors.Is(err, ErrUnreachable):
		return api.NewErrorOutcome(unreachable, api.NotApplied, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return api.NewErrorOutcome(api.CodeTimeout, api.OutcomeUnknown, err)
	}
	return api.NewErrorOutcome(api.CodeForwardFailed, api.OutcomeUnknown, err)
}

// RPCHandler answers one request: it decodes the arguments with dec and
// returns the reply to encode, or an error, which crosses the wire as
// api.ToWire makes it (its code, outcome and message). A handler
// that returns a Streamer answers with a stream (see Pool.Stream); the
// Streamer runs after the handler returned, with a context of its own.
type RPCHandler func(ctx context.Context, method string, dec func(v interface{}) error) (interface{}, error)

type rpcHeader struct {
	Method  string
	Timeout time.Duration // the caller's remaining time; zero: none
	// Stream: the caller reads a stream (Pool.Stream). Omitted when
	// false, so a Call's header is what it always was.
	Stream bool `codec:",omitempty"`
	// Traceparent and Tracestate: the caller's span (W3C, as HTTP
	// carries them), when the request is part of a trace; the handler's
	// context has it as its remote parent. Omitted otherwise; older
	// peers ignore them.
	Traceparent string `codec:",omitempty"`
	Tracestate  string `codec:",omitempty"`
	// Token: the ACL secret the call is made with (WithCallerToken), so
	// that the handler can authorize the call before it decodes a byte
	// of the arguments (CallerToken). Omitted when none; older peers
	// ignore it.
	Token string `codec:",omitempty"`
}

type rpcStatus struct {
	// WireError is the handler's error, inline: Code "" on success.
	// Releases without outcomes send no Outcome; releases before the
	// one error table, an empty Code and Msg rather than none.
	api.WireError
	// Closing: the server ends the connection after this answer (the
	// request was refused before its arguments were read), so the
	// caller must not pool it. Older servers never set it.
	Closing bool `codec:",omitempty"`
}

// ServeOptions tune ServeRPC.
type ServeOptions struct {
	// StreamWriteTimeout bounds each write of a stream; a peer that stops
	// reading for this long is disconnected. Zero: DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// IdleTimeout closes a connection that starts no request for this
	// long (zero: DefaultIdleTimeout). Pools check an idle connection
	// before they use it, so a closed one costs nothing.
	IdleTimeout time.Duration
	// MaxRequestBytes bounds one request's arguments by method (nil, or
	// zero for a method: DefaultMaxRequestBytes). A peer that sends more
	// is disconnected: it cannot make the server buffer what it likes.
	MaxRequestBytes func(method string) int64
	// ArgsTimeout bounds reading a request's arguments once its header
	// came (zero: DefaultArgsTimeout): a peer that stops half-way cannot
	// pin the connection and its buffer.
	ArgsTimeout time.Duration
}

// Bounds on what a peer may make a server read.
const (
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultMaxRequestBytes = 64 << 20
	maxHeaderBytes         = 64 << 10
	DefaultArgsTimeout     = time.Minute
	// A refused request's rest is read and dropped for at most this long
	// and this much before the connection closes.
	lingerTimeout = 2 * time.Second
	lingerBytes   = 256 << 20
	// A request refused before its arguments were decoded has at most
	// this much of them read and dropped (twice: to keep the connection
	// in step, then after the answer when they were larger, before the
	// connection closes): its caller proved nothing, so it may not make
	// the server read what it sends. The caller reads the answer after
	// its send fails (Pool.Call).
	refusedArgsBytes = 64 << 10
)

// errRequestTooLarge ends a connection whose request passed its bound.
var errRequestTooLarge = errors.New("transport: request larger than its bound")

// limitedReader reads at most n more bytes from r; ServeRPC sets n
// for each part of each request. (bufio reads ahead of the message being
// decoded, so a bound may count up to a buffer of the next one.)
type limitedReader struct {
	r   net.Conn
	n   int64
	hit bool // a read was refused: the request passed its bound
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.hit = true
		return 0, errRequestTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// requestContext is one request's context: cancelled when the caller's
// timeout (if it sent one) passes or the server's base ends, and by cancel
// once the request is done. Exactly one context is derived from base: one
// derived and dropped stays registered with base for the server's life.
func requestContext(base context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeout(base, timeout)
	}
	return context.WithCancel(base)
}

// ServeRPC returns a ConnHandler that serves requests from one connection,
// one at a time, until the peer closes it. Each request's context derives
// from base (cancel it on shutdown) with the caller's timeout. A request
// answered with a stream is the connection's last: ServeRPC closes it
// after the stream's end frame.
func ServeRPC(base context.Context, h RPCHandler, opts ServeOptions) ConnHandler {
	writeTimeout := opts.StreamWriteTimeout
	if writeTimeout <= 0 {
		writeTimeout = DefaultStreamWriteTimeout
	}
	idle := opts.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	argsTimeout := opts.ArgsTimeout
	if argsTimeout <= 0 {
		argsTimeout = DefaultArgsTimeout
	}
	maxArgs := func(method string) int64 {
		if opts.MaxRequestBytes != nil {
			if n := opts.MaxRequestBytes(method); n > 0 {
				return n
			}
		}
		return DefaultMaxRequestBytes
	}
	return func(conn net.Conn) {
		// Every request on conn, and its stream, knows its peer.
		base := withPeer(base, connPeer(conn))
		lr := &limitedReader{r: conn}
		r := bufio.NewReader(lr)
		w := bufio.NewWriter(conn)
		dec := codec.NewDecoder(r, msgpackHandle)
		enc := codec.NewEncoder(w, msgpackHandle)
		for {
			var hdr rpcHeader
			conn.SetReadDeadline(time.Now().Add(idle))
			lr.n, lr.hit = maxHeaderBytes, false
			if err := dec.Decode(&hdr); err != nil {
				return
			}
			conn.SetReadDeadline(time.Now().Add(argsTimeout))
			lr.n = maxArgs(hdr.Method)
			ctx, cancel := requestContext(base, hdr.Timeout)
			ctx = tracing.Context{Traceparent: hdr.Traceparent, Tracestate: hdr.Tracestate}.With(ctx)
			ctx = WithCallerToken(ctx, hdr.Token)
			decoded := false
			reply, err := h(ctx, hdr.Method, func(v interface{}) error {
				decoded = true
				return dec.Decode(v)
			})
			cancel()
			refused := !decoded && err != nil
			if refused {
				// Refused before its arguments were read (an unproven
				// caller, a server-only method, a server still
				// starting): their bound is the caller's proof, and it
				// has none. At most refusedArgsBytes of them are read,
				// and dropped, to keep the connection in step.
				lr.n = min(lr.n, refusedArgsBytes)
			}
			if !decoded { // keep the stream in step whatever the handler did
				var discard interface{}
				if dec.Decode(&discard) != nil && !lr.hit {
					return
				}
			}
			if lr.hit {
				// The rest of it is still on the wire: answer why, and
				// end the connection, which is out of step.
				if refused {
					st := statusOf(err)
					st.Closing = true
					closeAfter(conn, w, enc, st, refusedArgsBytes)
					return
				}
				st := rpcStatus{WireError: api.WireError{Code: api.CodeTooLarge, Outcome: api.NotApplied, Msg: fmt.Sprintf("%s: the request is larger than %d bytes", hdr.Method, maxArgs(hdr.Method))}}
				closeAfter(conn, w, enc, st, lingerBytes)
				return
			}
			conn.SetReadDeadline(time.Time{}) // a stream reads for the peer's end
			if s, ok := reply.(Streamer); ok && err == nil {
				if hdr.Stream {
					serveStream(base, hdr, conn, r, w, enc, s, writeTimeout)
					return
				}
				reply, err = nil, notStreamError(hdr.Method)
			} else if hdr.Stream && err == nil {
				// A plain reply to a stream request: a stream of one.
				one := reply
				serveStream(base, hdr, conn, r, w, enc, func(_ context.Context, send func(interface{}) error) error {
					return send(one)
				}, writeTimeout)
				return
			}
			st := rpcStatus{}
			if err != nil {
				st = statusOf(err)
				reply = nil
			}
			if err := enc.Encode(&st); err != nil {
				return
			}
			if err := enc.Encode(reply); err != nil {
				return
			}
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// closeAfter answers a request with st (and no reply) on a connection
// about to close. What the peer still sends is read and dropped for a
// moment, up to linger bytes (memory stays bounded), so that it can read
// the answer rather than a reset.
func closeAfter(conn net.Conn, w *bufio.Writer, enc *codec.Encoder, st rpcStatus, linger int64) {
	if enc.Encode(&st) == nil && enc.Encode(nil) == nil && w.Flush() == nil {
		conn.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.Copy(io.Discard, io.LimitReader(conn, linger))
	}
}

type callerTokenKey struct{}

// WithCallerToken returns ctx whose RPCs (Pool.Call, Pool.Stream) carry
// secret in their header, where the server reads it before the
// arguments ("" carries none).
func WithCallerToken(ctx context.Context, secret string) context.Context {
	if secret == "" && CallerToken(ctx) == "" {
		return ctx
	}
	return context.WithValue(ctx, callerTokenKey{}, secret)
}

// CallerToken is the token of ctx's RPC: in a handler, the one the
// request's header carries ("" for none, as from older peers).
func CallerToken(ctx context.Context) string {
	s, _ := ctx.Value(callerTokenKey{}).(string)
	return s
}

// Pool is an RPC client with a few idle connections per peer.
type Pool struct {
	dialer  *Dialer
	timeout time.Duration // dial timeout

	mu      sync.Mutex // guards idle, streams, closed
	idle    map[string][]*rpcConn
	streams map[*Stream]struct{} // open streams, closed by Close
	closed  bool
}

// maxIdlePerPeer bounds the idle connections kept per peer. Forwarded
// writes hold a connection for a whole commit, so a follower under load
// needs about as many as it has writes in flight; with too few it dials
// and the leader accepts a connection per write.
const maxIdlePerPeer = 64

// NewPool returns a Pool dialling from bindIP, over TLS when tlsc (nil:
// plaintext) says outgoing connections use it.
func NewPool(bindIP string, dialTimeout time.Duration, tlsc *tlsutil.Configurator) *Pool {
	return &Pool{dialer: NewDialer(bindIP, tlsc), timeout: dialTimeout, idle: make(map[string][]*rpcConn)}
}

type rpcConn struct {
	net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
	enc *codec.Encoder
	dec *codec.Decoder
}

// stale reports whether an idle connection is no longer usable: the peer
// closed it (it restarted, or shut down) or sent something unasked.
// Checking before use keeps a request from being written into a dead
// connection, where its failure on receive would leave the outcome
// unknown though nothing reached the peer.
func (c *rpcConn) stale() bool {
	return c.r.Buffered() > 0 || checkIdle(c.Conn) != nil
}

func (p *Pool) get(addr string) (*rpcConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		conns := p.idle[addr]
		if len(conns) == 0 {
			p.mu.Unlock()
			break
		}
		c := conns[len(conns)-1]
		p.idle[addr] = conns[:len(conns)-1]
		p.mu.Unlock()
		if !c.stale() {
			return c, nil
		}
		c.Close()
	}
	conn, err := p.dialer.dial(addr, protoRPC, p.timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	return &rpcConn{Conn: conn, r: r, w: w, enc: codec.NewEncoder(w, msgpackHandle), dec: codec.NewDecoder(r, msgpackHandle)}, nil
}

func (p *Pool) put(addr string, c *rpcConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[addr]) >= maxIdlePerPeer {
		c.Close()
		return
	}
	p.idle[addr] = append(p.idle[addr], c)
}

// Call sends method(args) to addr and decodes the answer into reply. An
// error wrapping ErrUnreachable means nothing was sent; an *api.WireError is
// the handler's answer; any other error leaves the outcome unknown.
func (p *Pool) Call(ctx context.Context, addr, method string, args, reply interface{}) error {
	c, err := p.get(addr)
	if err != nil {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	hdr := requestHeader(ctx, method)
	hdr.Timeout = time.Until(deadline)
	if err := c.send(&hdr, args); err != nil {
		// The server may have refused the request before reading all of
		// it and closed the connection: its answer, if it came, says why.
		refusal := c.refusal(ctx, deadline)
		c.Close()
		if refusal != nil {
			return refusal
		}
		return fmt.Errorf("rpc %s to %s: send: %w", method, addr, err)
	}
	var st rpcStatus
	if err := c.dec.Decode(&st); err != nil {
		c.Close()
		return fmt.Errorf("rpc %s to %s: receive: %w", method, addr, err)
	}
	var derr error
	if st.Code != "" {
		var discard interface{}
		derr = c.dec.Decode(&discard)
	} else {
		derr = c.dec.Decode(reply)
	}
	if derr != nil {
		c.Close()
		return fmt.Errorf("rpc %s to %s: receive: %w", method, addr, derr)
	}
	c.SetDeadline(time.Time{})
	if stop() && st.Code != api.CodeTooLarge && !st.Closing {
		p.put(addr, c)
	} else {
		// The deadline was forced, or the server ends the connection
		// (too_large, or a refusal before the arguments): the conn is
		// unusable.
		c.Close()
	}
	if st.Code != "" {
		return &st.WireError
	}
	return nil
}

// requestHeader is the header of ctx's request for method: its trace and
// its caller's token.
func requestHeader(ctx context.Context, method string) rpcHeader {
	hdr := rpcHeader{Method: method, Token: CallerToken(ctx)}
	if tc := tracing.ContextOf(ctx); tc.Traceparent != "" {
		hdr.Traceparent, hdr.Tracestate = tc.Traceparent, tc.Tracestate
	}
	return hdr
}

// send writes a request: its header and arguments.
func (c *rpcConn) send(hdr *rpcHeader, args interface{}) error {
	if err := c.enc.Encode(hdr); err != nil {
		return err
	}
	if err := c.enc.Encode(args); err != nil {
		return err
	}
	return c.w.Flush()
}

// refusal reads, after a failed send, the refusal a server answers
// before it closes the connection (rpcStatus.Closing); nil when none came
// within a moment (and before the call's deadline).
func (c *rpcConn) refusal(ctx context.Context, deadline time.Time) error {
	if ctx.Err() != nil {
		return nil
	}
	if d := time.Now().Add(lingerTimeout); d.Before(deadline) {
		deadline = d
	}
	c.SetReadDeadline(deadline)
	var st rpcStatus
	if c.dec.Decode(&st) != nil || st.Code == "" {
		return nil
	}
	return &st.WireError
}

// Close closes every idle connection and every open stream (their Recv
// returns ErrClosed). Idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	for addr, conns := range p.idle {
		for _, c := range conns {
			c.Close()
		}
		delete(p.idle, addr)
	}
	streams := p.streams
	p.streams = nil
	p.mu.Unlock()
	for s := range streams { // outside mu: Stream.close untracks under it
		s.Close()
	}
}
