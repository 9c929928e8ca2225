package httpapi_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// DNS rebinding: a web page whose name was rebound to the agent sends its
// requests with Host (and Origin) naming the attacker's domain. With ACLs
// off (the default) they wrote, read and deleted, Origin matching Host.
// Over plain HTTP, a Host that is not an IP literal, localhost, the
// machine's host name or a configured name is refused with 421 on every
// route and method, and changes nothing.
func TestHostNotAllowedRefused(t *testing.T) {
	addr := serveWith(t, httpapi.Config{AllowedHosts: []string{"registry.example.com", "*.registry.example"}})
	_, port, _ := net.SplitHostPort(addr)
	routes := []struct{ method, path, body string }{
		{"POST", "/v1/plugins", plug("csi", "rebind", "a1")},
		{"GET", "/v1/plugins/csi", ""},
		{"GET", "/v1/plugins/csi/rebind/a1", ""},
		{"PUT", "/v1/plugins/csi/rebind/a1/renew", ""},
		{"DELETE", "/v1/plugins/csi/rebind/a1", ""},
		{"DELETE", "/v1/nodes/n1/plugins", ""},
		{"GET", "/v1/health", ""},
		{"GET", "/v1/events", ""},
		{"PUT", "/v1/acl/bootstrap", ""},
		{"GET", "/v1/no/such/route", ""},
	}
	for _, tc := range []struct {
		host    string
		allowed bool
	}{
		{"127.0.0.1:" + port, true},
		{"localhost:" + port, true},
		{"LocalHost.:" + port, true},
		{"[::1]:" + port, true},
		{"10.1.2.3:" + port, true}, // any IP literal: it cannot be rebound
		{"registry.example.com:" + port, true},
		{"registry.example.com", true},
		{"node-1.registry.example:" + port, true},
		{"rebind.attacker.example:" + port, false},
		{"rebind.attacker.example", false},
		{"localhost.attacker.example:" + port, false},
		{"registry.example.com.attacker.example:" + port, false},
		{"registry.example:" + port, false}, // *.registry.example is its subdomains
		{"127.0.0.1.nip.io:" + port, false},
	} {
		for _, origin := range []bool{false, true} {
			for _, rt := range routes {
				hdr := map[string]string{"Content-Type": "application/json"}
				if origin {
					hdr["Origin"] = "http://" + tc.host
				}
				status, code := callHost(t, rt.method, "http://"+addr+rt.path, tc.host, rt.body, hdr)
				if refused := status == http.StatusMisdirectedRequest && code == "host_not_allowed"; refused == tc.allowed {
					t.Errorf("Host %s (Origin: %v) %s %s: %d %s; want allowed=%v", tc.host, origin, rt.method, rt.path, status, code, tc.allowed)
				}
			}
		}
	}
}

// A refused Host changes nothing: its registration is not applied.
func TestHostNotAllowedWritesNothing(t *testing.T) {
	addr := serveWith(t, httpapi.Config{})
	host := "rebind.attacker.example:" + addr[strings.LastIndex(addr, ":")+1:]
	hdr := map[string]string{"Content-Type": "application/json", "Origin": "http://" + host}
	if status, _ := callHost(t, "POST", "http://"+addr+"/v1/plugins", host, plug("csi", "rebind", "a1"), hdr); status != http.StatusMisdirectedRequest {
		t.Fatalf("POST with Host %s: %d, want 421", host, status)
	}
	if status, _ := callHost(t, "GET", "http://"+addr+"/v1/plugins/csi/rebind/a1", addr, "", nil); status != http.StatusNotFound {
		t.Fatalf("the refused registration: GET answered %d, want 404 (not applied)", status)
	}
}

// The probe port checks Host as the API does; kubelet names the pod's IP.
func TestProbeChecksHost(t *testing.T) {
	probe := testcluster.New(t, 1, testcluster.Options{}).WaitForLeader().HTTP.ProbeHandler()
	for _, tc := range []struct {
		host string
		want int
	}{
		{"10.0.0.7:7709", http.StatusOK},
		{"localhost:7709", http.StatusOK},
		{"rebind.attacker.example:7709", http.StatusMisdirectedRequest},
	} {
		req := httptest.NewRequest("GET", "/v1/health", nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		probe.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("probe, Host %s: %d, want %d", tc.host, rec.Code, tc.want)
		}
	}
}

// callHost sends a request to url with Host host and headers hdr, and
// returns the status and the error body's code.
func callHost(t *testing.T, method, url, host, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	var eb httpapi.ErrorBody
	if resp.StatusCode != http.StatusOK {
		json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&eb)
	}
	return resp.StatusCode, eb.Code
}
