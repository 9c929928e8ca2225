package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/api"
	"go.uber.org/goleak"
)

type codedErr struct{ code, msg string }

func (e codedErr) Error() string        { return e.msg }
func (e codedErr) Code() string         { return e.code }
func (e codedErr) Outcome() api.Outcome { return api.OutcomeUnknown }

// streamServer serves:
//
//	Count(n)   -> the stream 0..n-1, clean end
//	Fail(n)    -> 0..n-1, then an end with the error "boom" (code "boom")
//	Refuse     -> a handler error before any stream
//	Forever    -> one value, then blocks until its ctx ends; reports that
//	              on ended
//	Echo(s)    -> a plain reply
//	Mixed(n)   -> 0..n-1, the odd ones sent as Encoded, clean end
type streamServer struct {
	*Mux
	base   context.Context
	stop   context.CancelFunc
	ended  chan error // Forever's ctx error, once it returned
	opened chan struct{}
}

func newStreamServer(t *testing.T) *streamServer {
	t.Helper()
	s := &streamServer{ended: make(chan error, 16), opened: make(chan struct{}, 16)}
	s.base, s.stop = context.WithCancel(context.Background())
	h := func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		switch method {
		case "Count", "Fail":
			var n int
			if err := dec(&n); err != nil {
				return nil, err
			}
			return Streamer(func(ctx context.Context, send func(interface{}) error) error {
				for i := 0; i < n; i++ {
					if err := send(i); err != nil {
						return err
					}
				}
				if method == "Fail" {
					return codedErr{"boom", "boom after " + fmt.Sprint(n)}
				}
				return nil
			}), nil
		case "Mixed":
			var n int
			if err := dec(&n); err != nil {
				return nil, err
			}
			return Streamer(func(ctx context.Context, send func(interface{}) error) error {
				for i := 0; i < n; i++ {
					var v interface{} = i
					if i%2 == 1 {
						b, err := Encode(i)
						if err != nil {
							return err
						}
						v = b
					}
					if err := send(v); err != nil {
						return err
					}
				}
				return nil
			}), nil
		case "Refuse":
			return nil, codedErr{"no_leader", "no leader"}
		case "Forever":
			return Streamer(func(ctx context.Context, send func(interface{}) error) error {
				if err := send(1); err != nil {
					return err
				}
				s.opened <- struct{}{}
				<-ctx.Done()
				s.ended <- ctx.Err()
				return ctx.Err()
			}), nil
		case "Echo":
			var str string
			if err := dec(&str); err != nil {
				return nil, err
			}
			return "echo:" + str, nil
		}
		return nil, fmt.Errorf("no method %s", method)
	}
	m, err := Listen("127.0.0.1:0", ServeRPC(s.base, h, ServeOptions{}), hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Mux = m
	t.Cleanup(func() { s.stop(); m.Close() })
	return s
}

func recvInts(t *testing.T, s *Stream) ([]int, error) {
	t.Helper()
	var got []int
	for {
		var v int
		if err := s.Recv(&v); err != nil {
			return got, err
		}
		got = append(got, v)
	}
}

func TestStreamFramesInOrderThenEnd(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers' cleanups
	srv := newStreamServer(t)
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := srv.Addr().String()

	t.Run("clean end", func(t *testing.T) {
		s, err := p.Stream(ctx, addr, "Count", 1000)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wantCount(t, s, 1000)
		if err := s.Recv(new(int)); err != io.EOF {
			t.Fatalf("Recv after the end: %v, want io.EOF again", err)
		}
	})
	t.Run("encoded values arrive as the values", func(t *testing.T) {
		s, err := p.Stream(ctx, addr, "Mixed", 100)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wantCount(t, s, 100)
	})
	t.Run("end with error", func(t *testing.T) {
		s, err := p.Stream(ctx, addr, "Fail", 3)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got, err := recvInts(t, s)
		var re *api.WireError
		if !errors.As(err, &re) || re.Code != "boom" || re.Msg != "boom after 3" {
			t.Fatalf("end: %#v, want the remote error boom", err)
		}
		if len(got) != 3 {
			t.Fatalf("got %v before the error", got)
		}
	})
	t.Run("handler error before the stream", func(t *testing.T) {
		_, err := p.Stream(ctx, addr, "Refuse", struct{}{})
		var re *api.WireError
		if !errors.As(err, &re) || re.Code != "no_leader" {
			t.Fatalf("got %v, want the remote error no_leader", err)
		}
	})
	t.Run("plain method as a stream of one", func(t *testing.T) {
		s, err := p.Stream(ctx, addr, "Echo", "x")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var out string
		if err := s.Recv(&out); err != nil || out != "echo:x" {
			t.Fatalf("got %q, %v", out, err)
		}
		if err := s.Recv(&out); err != io.EOF {
			t.Fatalf("end: %v", err)
		}
	})
	t.Run("stream method with Call", func(t *testing.T) {
		var out int
		err := p.Call(ctx, addr, "Count", 3, &out)
		var re *api.WireError
		if !errors.As(err, &re) || re.Code != CodeNotStream {
			t.Fatalf("got %v, want the remote error %s", err, CodeNotStream)
		}
		// The connection stays in step: a plain call on it still works.
		var echo string
		if err := p.Call(ctx, addr, "Echo", "y", &echo); err != nil || echo != "echo:y" {
			t.Fatalf("call after: %q, %v", echo, err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		_, err := p.Stream(ctx, "127.0.0.1:1", "Count", 1)
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("got %v, want ErrUnreachable", err)
		}
	})
}

// Closing the client's stream (by Close or by its ctx) cancels the
// streamer's ctx on the server: it returns, and nothing is left running.
func TestStreamClientCloseCancelsServer(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers' cleanups
	srv := newStreamServer(t)
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	addr := srv.Addr().String()

	for _, how := range []string{"Close", "ctx"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := p.Stream(ctx, addr, "Forever", struct{}{})
			if err != nil {
				t.Fatal(err)
			}
			var v int
			if err := s.Recv(&v); err != nil || v != 1 {
				t.Fatalf("first value: %d, %v", v, err)
			}
			waitFor(t, srv.opened, "the streamer to start")
			recvErr := make(chan error, 1)
			go func() { recvErr <- s.Recv(&v) }()
			if how == "Close" {
				s.Close()
				s.Close() // idempotent
			} else {
				cancel()
			}
			select {
			case err := <-recvErr:
				want := error(ErrClosed)
				if how == "ctx" {
					want = context.Canceled
				}
				if !errors.Is(err, want) {
					t.Fatalf("pending Recv: %v, want %v", err, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("pending Recv not unblocked by " + how)
			}
			select {
			case err := <-srv.ended:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("server ctx: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server's streamer was not cancelled")
			}
		})
	}
}

// Shutting the server down (its base ctx, then the Mux) ends the client's
// Recv with an error, and Pool.Close ends a stream the pool still holds.
func TestStreamServerShutdownEndsRecv(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers' cleanups
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	ctx := context.Background()

	t.Run("base ctx", func(t *testing.T) {
		srv := newStreamServer(t)
		s, err := p.Stream(ctx, srv.Addr().String(), "Forever", struct{}{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var v int
		if err := s.Recv(&v); err != nil {
			t.Fatal(err)
		}
		srv.stop()
		err = s.Recv(&v)
		var re *api.WireError
		if err == nil || err == io.EOF {
			t.Fatalf("Recv after the server's shutdown: %v, want an error", err)
		}
		if errors.As(err, &re) {
			t.Logf("ended with the streamer's error %q", re.Msg)
		}
	})
	t.Run("Mux.Close", func(t *testing.T) {
		srv := newStreamServer(t)
		s, err := p.Stream(ctx, srv.Addr().String(), "Forever", struct{}{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var v int
		if err := s.Recv(&v); err != nil {
			t.Fatal(err)
		}
		waitFor(t, srv.opened, "the streamer to start")
		done := make(chan error, 1)
		go func() { done <- srv.Mux.Close() }()
		if err := s.Recv(&v); err == nil || err == io.EOF {
			t.Fatalf("Recv after Mux.Close: %v, want a broken connection", err)
		}
		waitFor(t, done, "Mux.Close")
	})
	t.Run("Pool.Close", func(t *testing.T) {
		srv := newStreamServer(t)
		p2 := NewPool("127.0.0.1", time.Second, nil)
		s, err := p2.Stream(ctx, srv.Addr().String(), "Forever", struct{}{})
		if err != nil {
			t.Fatal(err)
		}
		var v int
		if err := s.Recv(&v); err != nil {
			t.Fatal(err)
		}
		p2.Close()
		if err := s.Recv(&v); !errors.Is(err, ErrClosed) {
			t.Fatalf("Recv after Pool.Close: %v, want ErrClosed", err)
		}
		if _, err := p2.Stream(ctx, srv.Addr().String(), "Count", 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("Stream after Pool.Close: %v, want ErrClosed", err)
		}
	})
}

// A client that stops reading is cut off after the write timeout; the
// streamer's send fails and it returns.
func TestStreamWriteTimeoutFreesTheHandler(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers' cleanups
	returned := make(chan error, 1)
	h := func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		if err := dec(new(struct{})); err != nil {
			return nil, err
		}
		return Streamer(func(ctx context.Context, send func(interface{}) error) error {
			big := make([]byte, 64<<10)
			for {
				if err := send(big); err != nil {
					returned <- err
					return err
				}
			}
		}), nil
	}
	m, err := Listen("127.0.0.1:0", ServeRPC(context.Background(), h, ServeOptions{StreamWriteTimeout: 200 * time.Millisecond}), hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	s, err := p.Stream(context.Background(), m.Addr().String(), "Flood", struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Never Recv: the socket buffers fill and the server's write blocks.
	select {
	case err := <-returned:
		t.Logf("streamer returned: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the streamer stayed blocked on a peer that does not read")
	}
}

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
	}
	var zero T
	return zero
}

// A Call's header is byte for byte what it was before streams existed, so
// old and new binaries still talk.
func TestCallHeaderUnchanged(t *testing.T) {
	type oldHeader struct {
		Method  string
		Timeout time.Duration
	}
	enc := func(v interface{}) []byte {
		var b []byte
		if err := codec.NewEncoderBytes(&b, msgpackHandle).Encode(v); err != nil {
			t.Fatal(err)
		}
		return b
	}
	got := enc(&rpcHeader{Method: "Apply", Timeout: time.Second})
	want := enc(&oldHeader{Method: "Apply", Timeout: time.Second})
	if !bytes.Equal(got, want) {
		t.Fatalf("header %x, was %x", got, want)
	}
}

// wantCount reads s to its clean end and checks it carried 0, 1, ... n-1.
func wantCount(t *testing.T, s *Stream, n int) {
	t.Helper()
	got, err := recvInts(t, s)
	if err != io.EOF {
		t.Fatalf("end: %v, want io.EOF", err)
	}
	if len(got) != n {
		t.Fatalf("got %d values, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("value %d is %d", i, v)
		}
	}
}
