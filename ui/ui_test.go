package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/ui"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(ui.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		path, ctype, contains string
		status                int
	}{
		{"/ui/", "text/html", `<script src="app.js"`, 200},
		{"/ui/app.js", "javascript", "plugregLoadedAt", 200},
		{"/ui/style.css", "text/css", "--accent", 200},
		{"/ui/nope.js", "", "", 404},
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(b), tc.contains) {
			t.Errorf("%s: %d %q, %d bytes", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: CSP %q", tc.path, csp)
		}
	}
}

// The page never builds HTML from data: no innerHTML, no inline script.
func TestNoHTMLFromData(t *testing.T) {
	srv := httptest.NewServer(ui.Handler())
	defer srv.Close()
	for _, p := range []string{"/ui/app.js", "/ui/"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "onclick="} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s", p, bad)
			}
		}
	}
}
