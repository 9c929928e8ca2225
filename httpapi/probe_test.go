package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// The probe port's handler answers health, as the API does, and nothing
// else: no token is asked there, so no other route may be reached.
func TestProbeHandlerServesHealthAlone(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	defer c.Shutdown()
	n := c.WaitForLeader()
	probe := n.HTTP.ProbeHandler()
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/v1/health", http.StatusOK},
		{"GET", "/v1/health?live", http.StatusOK},
		{"GET", "/v1/plugins", http.StatusNotFound},
		{"GET", "/v1/metrics", http.StatusNotFound},
		{"GET", "/v1/agent/self", http.StatusNotFound},
		{"GET", "/v1/acl/tokens", http.StatusNotFound},
		{"POST", "/v1/plugins", http.StatusNotFound},
		{"PUT", "/v1/agent/leave", http.StatusNotFound},
		{"GET", "/ui/", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(tc.method, tc.path, nil)
		req.Host = "127.0.0.1" // httptest's example.com is not one of the agent's names
		probe.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.want)
		}
	}
}

// Thousands of idle connections to the probe port from one address hold
// at most Limits.MaxConnsPerClient of the agent's sockets, and those few
// are closed once idle: the API and the probe go on answering others.
// Before, every connection was held for good (19,950 of them took the
// agent's file descriptors).
func TestProbePortBounded(t *testing.T) {
	const attempts, perClient = 3000, 40
	needFiles(t, attempts+500)
	c := testcluster.New(t, 1, testcluster.Options{})
	s := httpapi.New(httpapi.Config{Backend: c.WaitForLeader().Backend(), IdleTimeout: 500 * time.Millisecond,
		Limits: httpapi.Limits{MaxConnsPerClient: perClient}})
	apiAddr := serveOn(t, "127.0.0.1:0", s.Serve, s.Close)
	probe := s.Probe()
	probeAddr := serveOn(t, "127.0.0.1:0", probe.Serve, probe.Close)

	// Every connection is opened before any sends a request: which ones
	// the agent holds is decided as it accepts them.
	conns := make([]net.Conn, 0, attempts)
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	for range attempts {
		conn, err := net.Dial("tcp", probeAddr)
		if err != nil {
			t.Fatalf("dial the probe port after %d connections: %v", len(conns), err)
		}
		conns = append(conns, conn)
	}
	type heldConn struct {
		net.Conn
		br *bufio.Reader
	}
	var held []heldConn
	for _, conn := range conns {
		if br, ok := probeOnce(conn); ok {
			held = append(held, heldConn{conn, br})
		}
	}
	if len(held) == 0 || len(held) > perClient {
		t.Fatalf("the probe port served %d of %d connections from one address; want 1 to %d", len(held), attempts, perClient)
	}

	for _, tc := range []struct {
		what, from, addr string
		want             int
	}{
		{"the API", "127.0.0.1", apiAddr, http.StatusOK},
		{"the probe, from another address", "127.0.0.2", probeAddr, http.StatusOK},
	} {
		if got := healthFrom(t, tc.from, tc.addr); got != tc.want {
			t.Errorf("%s: GET /v1/health from %s answered %d, want %d", tc.what, tc.from, got, tc.want)
		}
	}

	// The held connections, idle, are closed by the agent.
	for i, h := range held {
		h.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := h.br.ReadByte(); err != io.EOF {
			t.Fatalf("idle probe connection %d: %v; want it closed by the agent (EOF)", i, err)
		}
	}
	c.Eventually(10*time.Second, "the probe serves the crowded address again", func() bool {
		return healthFrom(t, "127.0.0.1", probeAddr) == http.StatusOK
	})
}

// probeOnce sends GET /v1/health on conn and reports whether it was
// answered 200 (a connection the agent holds; keep-alive) rather than
// refused (429, or closed).
func probeOnce(conn net.Conn) (*bufio.Reader, bool) {
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	defer conn.SetDeadline(time.Time{})
	fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\n\r\n", conn.RemoteAddr())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return br, resp.StatusCode == http.StatusOK
}

// healthFrom answers GET /v1/health on addr, asked from the local address
// from, on a connection of its own.
func healthFrom(t *testing.T, from, addr string) int {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + addr + "/v1/health")
	if err != nil {
		t.Fatalf("GET /v1/health on %s from %s: %v", addr, from, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// serveOn runs serve on a new listener at addr until the test ends and
// returns the listener's address.
func serveOn(t *testing.T, addr string, serve func(net.Listener) error, stop func() error) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(ln)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	return ln.Addr().String()
}

// needFiles raises the process's open-file limit to n if it is lower,
// and skips the test when the hard limit does not allow it.
func needFiles(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Skipf("needs %d open files; the hard limit is %d", n, lim.Max)
	}
	old := lim
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}
