package httpapi

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-connlimit"
	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/api"
)

// Limits bound what one agent's HTTP API holds at once, so that one
// caller cannot take it all: past a bound the request is answered 429
// too_many_requests with Retry-After (the Go client then tries another
// agent), and counted in plugreg_http_limited_total{limit=...}. Zero fields take
// the defaults; a negative one turns its bound off.
type Limits struct {
	// MaxConnsPerClient bounds concurrent connections from one IP
	// address (Consul's http_max_conns_per_client; default 200). A
	// connection past it is answered 429 and closed before a request is
	// read.
	MaxConnsPerClient int
	// MaxStreams bounds open event streams (GET /v1/events; default
	// 4096): each holds a goroutine, a subscription and its buffer.
	MaxStreams int
	// MaxBlockingQueries bounds reads waiting for a change (?index=;
	// default 4096).
	MaxBlockingQueries int
	// BodyReadTimeout bounds reading one request's body (default 30 s; a
	// snapshot restore's archive gets restoreReadTimeout): without it, a
	// client that sends its body a byte a minute holds a handler for good.
	BodyReadTimeout time.Duration
}

// Default limits.
const (
	DefaultMaxConnsPerClient  = 200
	DefaultMaxStreams         = 4096
	DefaultMaxBlockingQueries = 4096
	DefaultBodyReadTimeout    = 30 * time.Second
	restoreReadTimeout        = 10 * time.Minute
	retryAfterLimited         = "2"
)

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxConnsPerClient, DefaultMaxConnsPerClient)
	def(&l.MaxStreams, DefaultMaxStreams)
	def(&l.MaxBlockingQueries, DefaultMaxBlockingQueries)
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = DefaultBodyReadTimeout
	}
	return l
}

// slots is a counting semaphore that never waits: nil is unbounded.
type slots chan struct{}

func newSlots(n int) slots {
	if n < 0 {
		return nil
	}
	return make(slots, n)
}

func (s slots) take() bool {
	if s == nil {
		return true
	}
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s slots) release() {
	if s != nil {
		<-s
	}
}

// limited is a request refused by a limit, counted.
func limited(what, label string) error {
	metrics.IncrCounterWithLabels([]string{"http", "limited"}, 1, []metrics.Label{{Name: "limit", Value: label}})
	return fmt.Errorf("%w: %s on this agent; try again later or another agent", api.ErrTooManyRequests, what)
}

// bodyDeadline sets a read deadline for r's body and clears it once the
// body has been read to its end (a failed read keeps it: net/http then
// drains what is left of the body, and must give up too), so that the rest of the
// request (a write waiting for Raft, a restore applying) runs without one:
// net/http cancels a request whose connection's read times out.
func bodyDeadline(w http.ResponseWriter, r *http.Request, d time.Duration) {
	if r.Body == nil || r.Body == http.NoBody || d <= 0 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return // not a connection with deadlines (a test recorder)
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { rc.SetReadDeadline(time.Time{}) }}
}

type deadlineBody struct {
	io.ReadCloser
	once  sync.Once
	clear func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.clear)
	}
	return n, err
}

// connLimiter is a TCP listener that holds at most max connections per
// remote IP (go-connlimit counts them, as in Consul and Nomad); it answers
// the others in TLS when tls is set (it sits beneath the TLS listener, so
// that net/http still sees its *tls.Conn). It refuses in Accept rather
// than through go-connlimit's http.Server.ConnState hook: that hook runs in
// the server's accept loop, and its 429 is written there, so one slow peer
// (or a TLS handshake) would hold up every new connection.
type connLimiter struct {
	net.Listener
	lim *connlimit.Limiter
	tls *tls.Config
}

func limitConns(ln net.Listener, max int, tc *tls.Config) net.Listener {
	if max < 0 {
		return ln
	}
	return &connLimiter{Listener: ln, lim: connlimit.NewLimiter(connlimit.Config{MaxConnsPerClientIP: max}), tls: tc}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		free, err := l.lim.Accept(c)
		if err != nil {
			limited("connections from one client", "conns_per_client")
			// Its own goroutine, ended by the deadline: a slow peer
			// must not hold up Accept.
			if l.tls != nil {
				c = tls.Server(c, l.tls)
			}
			go refuseConn(c)
			continue
		}
		return connlimit.Wrap(c, free), nil
	}
}

// refuseConn answers 429 on a connection it will not serve (through TLS,
// if the listener speaks it) and closes it.
func refuseConn(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	body := `{"error":"too many connections from your address; try again later or another agent","code":"` + api.CodeTooManyRequests + `","outcome":"not_applied"}` + "\n"
	fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: %s\r\nConnection: close\r\nContent-Length: %s\r\n\r\n%s",
		retryAfterLimited, strconv.Itoa(len(body)), body)
}
