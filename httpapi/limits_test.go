package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/internal/testcluster"
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
