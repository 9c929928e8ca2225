package httpapi_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"github.com/plugreg/plugreg/tests/framework/testpki"
)

// A keep-alive connection that carries no request for IdleTimeout is
// closed by the agent: idle connections were held for good before.
func TestIdleConnectionsClosed(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	s := httpapi.New(httpapi.Config{Backend: c.Nodes[0].Backend(), IdleTimeout: 200 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Shutdown(context.Background())
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\n\r\n", ln.Addr())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the idle connection: %v; want it closed by the agent (EOF)", err)
	}
}

// serveWith starts an HTTP API with cfg over a one-server cluster's
// backend and returns its address.
func serveWith(t *testing.T, cfg httpapi.Config) string {
	t.Helper()
	c := testcluster.New(t, 1, testcluster.Options{})
	cfg.Backend = c.Nodes[0].Backend()
	s := httpapi.New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

// limitedAnswer checks resp is a limit's refusal: 429, Retry-After, code
// too_many_requests.
func limitedAnswer(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	defer resp.Body.Close()
	var eb httpapi.ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || eb.Code != "too_many_requests" {
		t.Fatalf("%s: %d %+v (Retry-After %q), want 429 too_many_requests", what, resp.StatusCode, eb, resp.Header.Get("Retry-After"))
	}
}

// Past MaxStreams an event stream is refused with 429; one closing makes
// room. Past MaxBlockingQueries a blocking read is, while plain reads go
// on. Before, each held a goroutine and a subscription without bound.
func TestStreamAndBlockingQueryLimits(t *testing.T) {
	sink := metrics.NewInmemSink(time.Minute, time.Minute)
	conf := metrics.DefaultConfig("plugreg")
	conf.EnableRuntimeMetrics = false // its goroutine would outlive the test
	if _, err := metrics.NewGlobal(conf, sink); err != nil {
		t.Fatal(err)
	}
	addr := serveWith(t, httpapi.Config{Limits: httpapi.Limits{MaxStreams: 2, MaxBlockingQueries: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	get := func(ctx context.Context, path string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first, stopFirst := context.WithCancel(ctx)
	for i, c := range []context.Context{first, ctx} {
		if resp := get(c, "/v1/events"); resp.StatusCode != 200 {
			t.Fatalf("stream %d: %d", i, resp.StatusCode)
		}
	}
	limitedAnswer(t, "a third stream", get(ctx, "/v1/events"))
	stopFirst()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := get(ctx, "/v1/events")
		if resp.StatusCode == 200 {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("a stream closing made no room")
		}
		time.Sleep(20 * time.Millisecond)
	}

	resp := get(ctx, "/v1/types")
	resp.Body.Close()
	index := resp.Header.Get("X-Plugreg-Index")
	// Two blocking reads: whichever comes second is refused at once.
	answers := make(chan *http.Response, 2)
	for i := 0; i < 2; i++ {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/v1/types?wait=30s&index="+index, nil)
			resp, _ := http.DefaultClient.Do(req) // nil once cancelled
			answers <- resp
		}()
	}
	if resp := <-answers; resp == nil {
		t.Fatal("a blocking query failed")
	} else {
		limitedAnswer(t, "the second blocking query", resp)
	}
	if resp := get(ctx, "/v1/types"); resp.StatusCode != 200 {
		t.Fatalf("a plain read beside the blocking one: %d", resp.StatusCode)
	}
	counted := map[string]int{}
	for _, iv := range sink.Data() {
		for _, c := range iv.Counters {
			if c.Name == "plugreg.http.limited" {
				for _, l := range c.Labels {
					counted[l.Value] += c.Count
				}
			}
		}
	}
	if counted["event_streams"] < 1 || counted["blocking_queries"] != 1 {
		t.Fatalf("refusals counted: %v, want event_streams >= 1 and blocking_queries 1", counted)
	}
	cancel()
	if resp := <-answers; resp != nil {
		resp.Body.Close()
	}
}

// Past MaxConnsPerClient a connection from the same address is answered
// 429 and closed before a request is read; the others keep working.
func TestConnectionsPerClientLimit(t *testing.T) {
	ca := testpki.New(t, "cluster")
	srv := ca.Server("")
	cert, err := tls.LoadX509KeyPair(srv.Cert, srv.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.CAFile)
	pool.AppendCertsFromPEM(pem)
	for _, tc := range []struct {
		name   string
		server *tls.Config
		client *tls.Config
	}{
		{"http", nil, nil},
		// Counted beneath TLS, answered through it.
		{"https", &tls.Config{Certificates: []tls.Certificate{cert}}, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serveWith(t, httpapi.Config{TLS: tc.server, Limits: httpapi.Limits{MaxConnsPerClient: 2}})
			dial := func() net.Conn {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				if tc.client != nil {
					return tls.Client(c, tc.client)
				}
				return c
			}
			conns := []net.Conn{dial(), dial()}
			// Both are served (and so counted) before the third is dialled.
			for _, c := range conns {
				fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			third := dial()
			third.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(third), nil)
			if err != nil {
				t.Fatalf("the third connection: %v, want a 429", err)
			}
			limitedAnswer(t, "a third connection", resp)
			conns[0].Close()
			scheme := "http"
			hc := &http.Client{Timeout: 5 * time.Second}
			if tc.client != nil {
				scheme, hc.Transport = "https", &http.Transport{TLSClientConfig: tc.client}
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp, err := hc.Get(scheme + "://" + addr + "/v1/health")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("a closed connection made no room: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// A body that stops arriving is cut after BodyReadTimeout: the handler and
// its connection are let go. Before, it was held for good.
func TestBodyReadTimeout(t *testing.T) {
	addr := serveWith(t, httpapi.Config{Limits: httpapi.Limits{BodyReadTimeout: 300 * time.Millisecond}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/plugins HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"Type\":")
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("a stalled body: %d", resp.StatusCode)
		}
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("want the connection closed by the agent: %v", err)
	}
	// A whole body is served as before.
	resp, err := http.Post("http://"+addr+"/v1/plugins", "application/json",
		strings.NewReader(`{"Type":"csi","Name":"a","AllocID":"1","NodeID":"n","ConnectionInfo":{"SocketPath":"/s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a whole body: %d", resp.StatusCode)
	}
}
