package transport

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/netcount"
	"go.uber.org/goleak"
)

type deniedError struct{}

func (deniedError) Error() string        { return "no token" }
func (deniedError) Code() string         { return "permission_denied" }
func (deniedError) Outcome() api.Outcome { return api.NotApplied }

// A request its handler refuses before decoding its arguments (the caller
// proved nothing: the token in the header, the peer's certificate) has at
// most a few KiB of them read: small ones are dropped and the connection
// stays in step; of a 64 MiB request the server reads 128 KiB and closes
// the connection, where it once decoded it whole to keep the connection in
// step. The caller reads the refusal though its send failed, and does not
// pool the connection; the next call is served, with the token it carries
// in its header.
func TestRefusalBeforeArgumentsReadsNone(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := func(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		if CallerToken(ctx) != "secret" {
			return nil, deniedError{}
		}
		var b []byte
		if err := dec(&b); err != nil {
			return nil, err
		}
		return len(b), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := netcount.Wrap(ln)
	m := serveMux(counted, ServeRPC(context.Background(), h, ServeOptions{}), hclog.NewNullLogger(), nil)
	defer m.Close()
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, token string
		size        int
		code        string
		maxRead     int64
		pooled      int // idle connections after the call
	}{
		{"no token, 64 MiB", "", 64 << 20, "permission_denied", 2*refusedArgsBytes + 64<<10, 0},
		{"wrong token, small", "other", 10, "permission_denied", 64 << 10, 1},
		{"the token, small", "secret", 10, "", 64 << 10, 1},
		{"the token, 8 MiB", "secret", 8 << 20, "", 9 << 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := counted.Read()
			var n int
			err := p.Call(WithCallerToken(ctx, tc.token), ln.Addr().String(), "M", make([]byte, tc.size), &n)
			var re *api.WireError
			switch {
			case tc.code == "" && (err != nil || n != tc.size):
				t.Fatalf("served: %d, %v", n, err)
			case tc.code != "" && (!errors.As(err, &re) || re.Code != tc.code):
				t.Fatalf("%v; want %s", err, tc.code)
			}
			time.Sleep(50 * time.Millisecond) // the server's linger ends when the caller's send does
			if read := counted.Read() - before; read > tc.maxRead {
				t.Fatalf("the server read %d bytes; want at most %d", read, tc.maxRead)
			}
			p.mu.Lock()
			pooled := len(p.idle[ln.Addr().String()])
			p.mu.Unlock()
			if pooled != tc.pooled {
				t.Fatalf("%d idle connections; want %d", pooled, tc.pooled)
			}
		})
	}
}
