// Package ui is the web UI every agent serves at /ui/: the cluster's
// members and health, plugin types, plugins and each name's recency list,
// each type's coverage, and a live event view, in plain HTML, CSS and JavaScript embedded in the
// binary (nothing is fetched from anywhere else). It reads the HTTP API
// like any client, with the ACL token the user gives it.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the UI's files under /ui/.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Scripts and styles only from this origin, and no inline code:
		// the page renders registry data (names, options) that anyone
		// with a write token chose.
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// A new binary serves new files at the same names.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
