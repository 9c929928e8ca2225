package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/api"
)

// Streamer is what a handler returns, instead of a reply, to answer with a
// stream of values: it calls send once per value, in order, and returns
// when done (nil: a clean end) or when ctx ends. ctx ends when the peer
// closes the connection or goes away, and when ServeRPC's base context
// ends. send fails once the stream is broken; the streamer should then
// return.
type Streamer func(ctx context.Context, send func(v interface{}) error) error

// Encoded is a stream value already in the wire encoding (the bytes of
// Encode): a Streamer that sends one value to many peers (a server's event
// to every client agent's upstream) encodes it once, not once per peer.
type Encoded []byte

// Encode returns v in the wire encoding of a stream's values, to send as
// Encoded.
func Encode(v interface{}) (Encoded, error) {
	var b []byte
	if err := codec.NewEncoderBytes(&b, msgpackHandle).Encode(v); err != nil {
		return nil, fmt.Errorf("transport: encode %T: %w", v, err)
	}
	return b, nil
}

// DefaultStreamWriteTimeout is ServeOptions.StreamWriteTimeout's default.
const DefaultStreamWriteTimeout = 30 * time.Second

// CodeNotStream is the code of a streaming method called with
// Call. (A plain method called with Stream is served as a stream of its
// one reply.)
const CodeNotStream = "not_stream"

// streamFrame precedes every value of a stream; the last frame has End
// set, carries the streamer's error (Code "" for a clean end) and no
// value.
type streamFrame struct {
	End bool `codec:",omitempty"`
	// WireError is the streamer's error, inline, on the end frame.
	api.WireError
}

type notStreamError string

func (e notStreamError) Error() string {
	return fmt.Sprintf("transport: %s is a stream; call it with Pool.Stream", string(e))
}
func (e notStreamError) Code() string         { return CodeNotStream }
func (e notStreamError) Outcome() api.Outcome { return api.NotApplied }

// statusOf is err in the status's wire form.
func statusOf(err error) rpcStatus {
	return rpcStatus{WireError: *api.ToWire(err).(*api.WireError)}
}

// serveStream writes the stream's frames to conn until the streamer ends,
// then the end frame. The caller closes the connection afterwards.
func serveStream(base context.Context, hdr rpcHeader, conn net.Conn, r *bufio.Reader, w *bufio.Writer, enc *codec.Encoder, s Streamer, writeTimeout time.Duration) {
	ctx, cancel := requestContext(base, hdr.Timeout)
	defer cancel()
	// The peer sends nothing more on a streamed connection: any read
	// that returns means it closed the connection or went away.
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		io.Copy(io.Discard, r)
		cancel()
	}()
	// Once ctx ends, fail writes at once instead of after the timeout.
	stop := context.AfterFunc(ctx, func() { conn.SetWriteDeadline(time.Now()) })
	defer func() {
		stop()
		conn.Close() // a streamed connection is never reused; ends the reader
		<-readerDone
	}()

	write := func(vs ...interface{}) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		for _, v := range vs {
			if err := encodeTo(w, enc, v); err != nil {
				return err
			}
		}
		return w.Flush()
	}
	if err := write(&rpcStatus{}); err != nil {
		return
	}
	var broken error // set by send once a write failed; the stream is then dead
	err := s(ctx, func(v interface{}) error {
		if broken != nil {
			return broken
		}
		if err := write(&streamFrame{}, v); err != nil {
			broken = fmt.Errorf("transport: stream broken: %w", err)
			return broken
		}
		return nil
	})
	if broken != nil {
		return
	}
	end := streamFrame{End: true}
	if err != nil {
		end.WireError = statusOf(err).WireError
	}
	write(&end)
}

// encodeTo writes v with enc, or as it is when it is Encoded. The encoder
// writes all of a value to w before Encode returns, so bytes written to w
// between two Encode calls land between the two values.
func encodeTo(w *bufio.Writer, enc *codec.Encoder, v interface{}) error {
	if b, ok := v.(Encoded); ok {
		_, err := w.Write(b)
		return err
	}
	return enc.Encode(v)
}

// Stream is the receiving end of a streamed RPC. Recv is for one
// goroutine; Close may be called from any.
type Stream struct {
	p      *Pool
	c      *rpcConn
	method string
	addr   string
	stop   func() bool // stops the ctx watch

	mu     sync.Mutex // guards closed, reason
	closed bool
	reason error // why Close was called: ErrClosed, or ctx's error

	ended error // set by Recv once the stream ended (io.EOF or an *api.WireError); Recv's goroutine only
}

// Stream calls a streaming method at addr on a connection of its own
// (never pooled) and returns the stream once the handler has accepted the
// call. An error wrapping ErrUnreachable means nothing was sent; a
// *api.WireError is the handler's refusal. Cancelling ctx closes the stream.
func (p *Pool) Stream(ctx context.Context, addr, method string, args interface{}) (*Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conn, err := p.dialer.dial(addr, protoRPC, p.timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	c := &rpcConn{Conn: conn, r: r, w: w, enc: codec.NewEncoder(w, msgpackHandle), dec: codec.NewDecoder(r, msgpackHandle)}
	s := &Stream{p: p, c: c, method: method, addr: addr}
	if !p.track(s) {
		conn.Close()
		return nil, ErrClosed
	}
	stop := context.AfterFunc(ctx, func() { s.close(ctx.Err()) })
	s.mu.Lock()
	if s.closed { // ctx ended already
		s.mu.Unlock()
		stop()
	} else {
		s.stop = stop
		s.mu.Unlock()
	}

	// The handshake (request out, status in) is bounded; the stream
	// itself is not: it lasts as long as ctx and the peer want.
	hdr := rpcHeader{Method: method, Stream: true, Token: CallerToken(ctx)}
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok {
		hdr.Timeout = time.Until(d)
		deadline = d
	}
	conn.SetDeadline(deadline)
	fail := func(stage string, err error) (*Stream, error) {
		s.Close()
		if reason := s.closeReason(); reason != nil && reason != ErrClosed {
			err = reason
		}
		return nil, fmt.Errorf("stream %s to %s: %s: %w", method, addr, stage, err)
	}
	if err := c.enc.Encode(&hdr); err != nil {
		return fail("send", err)
	}
	if err := c.enc.Encode(args); err != nil {
		return fail("send", err)
	}
	if err := c.w.Flush(); err != nil {
		return fail("send", err)
	}
	var st rpcStatus
	if err := c.dec.Decode(&st); err != nil {
		return fail("receive", err)
	}
	if st.Code != "" {
		s.Close()
		return nil, &st.WireError
	}
	s.mu.Lock()
	if !s.closed {
		conn.SetDeadline(time.Time{})
	}
	s.mu.Unlock()
	return s, nil
}

// Recv decodes the next value into v. It returns io.EOF when the stream
// ended cleanly, an *api.WireError when the streamer ended with an error,
// ErrClosed (or ctx's error) after Close (or ctx's end), and another error
// when the connection broke.
func (s *Stream) Recv(v interface{}) error {
	if s.ended != nil {
		return s.ended
	}
	var f streamFrame
	if err := s.c.dec.Decode(&f); err != nil {
		return s.recvErr(err)
	}
	if f.End {
		s.ended = io.EOF
		if f.Code != "" {
			s.ended = &f.WireError
		}
		s.Close()
		return s.ended
	}
	if err := s.c.dec.Decode(v); err != nil {
		return s.recvErr(err)
	}
	return nil
}

func (s *Stream) recvErr(err error) error {
	if reason := s.closeReason(); reason != nil {
		return reason
	}
	s.Close()
	return fmt.Errorf("stream %s from %s: receive: %w", s.method, s.addr, err)
}

func (s *Stream) closeReason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Close ends the stream and unblocks a pending Recv. Idempotent.
func (s *Stream) Close() { s.close(ErrClosed) }

func (s *Stream) close(reason error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.reason = reason
	stop := s.stop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.c.Close()
	s.p.untrack(s)
}

func (p *Pool) track(s *Stream) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.streams == nil {
		p.streams = make(map[*Stream]struct{})
	}
	p.streams[s] = struct{}{}
	return true
}

func (p *Pool) untrack(s *Stream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.streams, s)
}
