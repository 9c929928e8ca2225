package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/api"
	"go.uber.org/goleak"
)

func echoServer(t *testing.T, addr string) *Mux {
	t.Helper()
	h := func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		var s string
		if err := dec(&s); err != nil {
			return nil, err
		}
		return method + ":" + s, nil
	}
	m, err := Listen(addr, ServeRPC(context.Background(), h, ServeOptions{}), hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A pooled connection to a peer that has since restarted is dead; the
// pool must notice before it writes a request into it. Otherwise the call
// fails on receive and the caller is told the outcome is unknown, though
// nothing reached the peer.
func TestPoolDropsConnectionsToARestartedPeer(t *testing.T) {
	defer goleak.VerifyNone(t)
	m := echoServer(t, "127.0.0.1:0")
	addr := m.Addr().String()
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := func() (string, error) {
		var out string
		err := p.Call(ctx, addr, "Echo", "x", &out)
		return out, err
	}
	if out, err := call(); err != nil || out != "Echo:x" {
		t.Fatalf("first call: %q, %v", out, err)
	}
	// The peer restarts on the same address; the pool still holds the
	// old connection, whose other end is now closed.
	m.Close()
	m = echoServer(t, addr)
	defer m.Close()
	time.Sleep(50 * time.Millisecond) // let the FIN arrive, as it has long since in practice
	out, err := call()
	if err != nil {
		t.Fatalf("call after the peer restarted: %v (the pool used a dead connection)", err)
	}
	if out != "Echo:x" {
		t.Fatalf("got %q", out)
	}
}

// A connection that fails to dial is reported as not sent.
func TestPoolUnreachableIsNotSent(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	err := p.Call(context.Background(), "127.0.0.1:1", "Echo", "x", new(string))
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("got %v, want ErrUnreachable", err)
	}
}

// A request whose arguments pass their bound is answered "too_large" and
// its connection closed: a peer cannot make the server buffer what it
// likes. A connection that starts no request for the idle timeout is
// closed, and the pool, which checks idle connections before it uses
// them, goes on with a new one.
func TestServerBoundsRequests(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		var b []byte
		if err := dec(&b); err != nil {
			return nil, err
		}
		return len(b), nil
	}
	opts := ServeOptions{IdleTimeout: 200 * time.Millisecond, ArgsTimeout: 300 * time.Millisecond, MaxRequestBytes: func(method string) int64 {
		if method == "Big" {
			return 256 << 10
		}
		return 64 << 10
	}}
	m, err := Listen("127.0.0.1:0", ServeRPC(context.Background(), h, opts), hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	addr := m.Addr().String()
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		method string
		size   int
		ok     bool
	}{
		{"Small", 32 << 10, true},
		{"Small", 128 << 10, false},
		{"Big", 128 << 10, true},
		{"Big", 1 << 20, false},
		{"Small", 10, true}, // after a refusal: a new connection
	} {
		var n int
		err := p.Call(ctx, addr, tc.method, make([]byte, tc.size), &n)
		var re *api.WireError
		switch {
		case tc.ok && (err != nil || n != tc.size):
			t.Fatalf("%s of %d bytes: %d, %v", tc.method, tc.size, n, err)
		case !tc.ok && (!errors.As(err, &re) || re.Code != "too_large"):
			t.Fatalf("%s of %d bytes: %v; want too_large", tc.method, tc.size, err)
		}
	}
	time.Sleep(time.Second) // past the idle timeout: the server closed the pooled connection
	var n int
	if err := p.Call(ctx, addr, "Small", []byte("x"), &n); err != nil || n != 1 {
		t.Fatalf("after the idle timeout: %d, %v", n, err)
	}

	// A request whose arguments stop half-way: the server drops the
	// connection after ArgsTimeout instead of waiting for the rest.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte{protoRPC})
	enc := codec.NewEncoder(conn, msgpackHandle)
	enc.Encode(&rpcHeader{Method: "Small"})
	conn.Write([]byte{0xc5, 0x10, 0x00, 'x'}) // a 4 KiB byte string, 1 byte of it
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("a stalled request's connection: %v; want it closed by the server", err)
	}
}

// ownDone is a server base context the context package cannot see into:
// each context derived from it (through the connection's value context)
// is watched by a goroutine of the context package until the derived one
// is cancelled, so those goroutines count the derived contexts not
// cancelled yet.
type ownDone struct {
	context.Context
	done chan struct{}
}

func (c ownDone) Done() <-chan struct{} { return c.done }

func (c ownDone) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// watchers counts the context package's goroutines watching a parent.
func watchers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "created by context.(*cancelCtx).propagateCancel")
}

// Each request, plain or streamed, with or without the caller's timeout,
// leaves nothing registered with the server's base context once it is
// answered: a context derived and dropped stays registered with the base
// for the server's life, so one per request is memory that grows with
// every request a server ever answers.
func TestRequestsLeaveNothingOnTheServersContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	base := ownDone{Context: context.Background(), done: make(chan struct{})}
	defer close(base.done) // ends the watch of whatever was left
	h := func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		var s string
		if err := dec(&s); err != nil {
			return nil, err
		}
		if method == "Stream" {
			return Streamer(func(ctx context.Context, send func(interface{}) error) error { return send(s) }), nil
		}
		return s, nil
	}
	m, err := Listen("127.0.0.1:0", ServeRPC(base, h, ServeOptions{}), hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	for _, tc := range []struct {
		name    string
		timeout bool
		stream  bool
	}{
		{"plain", false, false},
		{"plain with a timeout", true, false},
		{"stream", false, true},
		{"stream with a timeout", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 50 {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if tc.timeout {
					ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
				}
				if tc.stream {
					err = streamAll(ctx, p, m.Addr().String(), "Stream", "x")
				} else {
					err = p.Call(ctx, m.Addr().String(), "Echo", "x", new(string))
				}
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			// The server cancels a request's context right after its
			// answer is written; the caller may read it a moment before.
			deadline := time.Now().Add(10 * time.Second)
			for watchers() != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := watchers(); n != 0 {
				t.Fatalf("%d contexts still registered with the server's base after 50 answered requests", n)
			}
		})
	}
}

// streamAll opens a stream, reads it to its end and closes it.
func streamAll(ctx context.Context, p *Pool, addr, method string, args interface{}) error {
	s, err := p.Stream(ctx, addr, method, args)
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		var v interface{}
		if err := s.Recv(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
