package httpapi

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"

	"github.com/plugreg/plugreg/api"
)

// refuseCrossSite refuses what a web page at another origin can make a
// browser send without asking this agent first. Browsers send "simple"
// cross-site requests without a CORS preflight: a POST with no custom
// header and a body of text/plain, a form or multipart (or none). plugreg
// answers no preflight, so nothing else leaves such a page (PUT, DELETE,
// X-Plugreg-Token, a JSON body); but a blind POST could register a plugin
// with ACLs off, or burn the ACL bootstrap. So a request that changes
// something is refused when its browser says it comes from another origin
// (Origin), and when its body is of a type a form can send: plugreg's
// bodies are JSON (or an archive), and curl's -d needs
// -H 'Content-Type: application/json'.
func refuseCrossSite(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			return fmt.Errorf("%w: a %s from the web page at %q, not from this agent's origin (%s): cross-site requests are refused", api.ErrPermissionDenied, r.Method, o, r.Host)
		}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case err != nil:
			return fmt.Errorf("%w: Content-Type %q: %v", api.ErrInvalid, ct, err)
		case mt == "text/plain" || mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data":
			return fmt.Errorf("%w: Content-Type %s, which any web page can send: send application/json (curl: -H 'Content-Type: application/json')", api.ErrInvalid, mt)
		}
	}
	return nil
}
