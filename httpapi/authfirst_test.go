package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/netcount"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"github.com/plugreg/plugreg/ui"
)

// countingListener counts the bytes its connections' readers took from
// zeros is an endless body that allocates nothing.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// sendLarge sends a request with a body of size zeros, on a connection of
// its own, and returns the answer's status: it reads the answer while it
// sends, as a server may answer (and close) before it reads the body.
func sendLarge(addr, method, path, token string, size int64) (int, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	hdr := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", method, path, addr, size)
	if token != "" {
		hdr += "X-Plugreg-Token: " + token + "\r\n"
	}
	if _, err := io.WriteString(conn, hdr+"\r\n"); err != nil {
		return 0, err
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		io.Copy(conn, io.LimitReader(zeros{}, size)) // ends with the connection
	}()
	defer func() { conn.Close(); <-sent }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// routeURL is a request path for a route pattern: each wildcard a word.
func routeURL(pattern string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	path = strings.ReplaceAll(path, "{$}", "")
	for strings.Contains(path, "{") {
		i, j := strings.Index(path, "{"), strings.Index(path, "}")
		path = path[:i] + "x" + path[j+1:]
	}
	return method, path
}

// Under ACLs with default deny, a caller without a token (or with an
// unknown one) is refused on every route before a byte of its body is
// read, whatever it sends: a 64 MiB body costs the agent a few KiB read
// from the network and no memory in proportion; so does a body sent to an
// open route, which reads none, or to no route. Every route of the API is walked (a new route is
// too). Without the check before the body, PUT /v1/operator/snapshot
// read the whole body (up to 512 MiB) before its 403, and registrations
// and token creations read 128 KiB.
func TestEveryRouteRefusesBeforeReadingTheBody(t *testing.T) {
	key, _ := gossip.GenerateKey()
	acl := httpapi.ACLConfig{Enabled: true, DefaultDeny: true}
	c := testcluster.New(t, 1, testcluster.Options{ACL: acl, GossipKey: key})
	n := c.Nodes[0]
	api := httpapi.New(httpapi.Config{Backend: n.Backend(), ACL: acl, Keyring: n.GossipKeyring(), UI: ui.Handler(),
		Metrics: http.NotFoundHandler(), OnLeave: func() { t.Error("an anonymous leave was served") }})
	ln, err := net.Listen("tcp", n.IP+":0")
	if err != nil {
		t.Fatal(err)
	}
	counted := netcount.Wrap(ln)
	go api.Serve(counted)
	defer api.Close()
	base := "http://" + ln.Addr().String()
	// Bootstrapped first, so that the walk's own bootstrap changes
	// nothing.
	if r := call(t, "PUT", base+"/v1/acl/bootstrap", ""); r.status != 200 {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}

	const bodySize = 64 << 20
	routes := httpapi.RouteIsOpen(api)
	patterns := make([]string, 0, len(routes))
	for p := range routes {
		patterns = append(patterns, p)
	}
	sort.Strings(patterns)
	if len(patterns) < 30 {
		t.Fatalf("only %d routes: %v", len(patterns), patterns)
	}
	type request struct{ pattern, token string }
	var requests []request
	for _, token := range []string{"", "not-a-token"} {
		for _, p := range patterns {
			requests = append(requests, request{p, token})
		}
	}
	requests = append(requests, request{"POST /v1/no-such-route", ""})
	for _, req := range requests {
		pattern := req.pattern
		t.Run(pattern+"/token "+req.token, func(t *testing.T) {
			method, path := routeURL(pattern)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			readBefore := counted.Read()
			status, err := sendLarge(ln.Addr().String(), method, path, req.token, bodySize)
			// The server's side of the connection ends after the answer:
			// what it read by then is all it reads.
			time.Sleep(100 * time.Millisecond)
			read := counted.Read() - readBefore
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: status %d (err %v), %d bytes read, %d bytes allocated", pattern, status, err, read, allocated)
			if open, ok := routes[pattern]; !ok && status != http.StatusNotFound || ok && !open && status != http.StatusForbidden {
				t.Errorf("status %d (err %v), want 403", status, err)
			}
			if read > 16<<10 {
				t.Errorf("the agent read %d bytes of a refused request; want a few KiB", read)
			}
			if allocated > 16<<20 {
				t.Errorf("the request allocated %d bytes; want far less than its %d-byte body", allocated, bodySize)
			}
		})
	}
}

// An operator's restore is served, through a server's HTTP API and
// through a client agent's (which passes it on over the server port with
// the token in the request's header).
func TestOperatorRestoresAfterTheCheck(t *testing.T) {
	acl := httpapi.ACLConfig{Enabled: true, DefaultDeny: true}
	c := testcluster.New(t, 1, testcluster.Options{ACL: acl})
	srv := c.Nodes[0].HTTPURL
	r := call(t, "PUT", srv+"/v1/acl/bootstrap", "")
	var boot struct{ SecretID string }
	if err := json.Unmarshal([]byte(r.body), &boot); r.status != 200 || err != nil {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	root := []string{"X-Plugreg-Token", boot.SecretID}
	cn := c.AddClient(nil)
	c.Eventually(30*time.Second, "the client agent reaching a server", func() bool {
		return call(t, "GET", cn.HTTPURL+"/v1/types", "", root...).status == 200
	})
	saved := call(t, "GET", srv+"/v1/operator/snapshot", "", root...)
	if saved.status != 200 {
		t.Fatalf("save: %d %s", saved.status, saved.body)
	}
	for _, tc := range []struct{ name, url string }{{"server", srv}, {"client agent", cn.HTTPURL}} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("PUT", tc.url+"/v1/operator/snapshot", bytes.NewReader([]byte(saved.body)))
			req.Header.Set(root[0], root[1])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), `"restored"`) {
				t.Fatalf("restore: %d %s", resp.StatusCode, body)
			}
		})
	}
}
