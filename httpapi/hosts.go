package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/plugreg/plugreg/api"
)

// allowedHosts are the names a plain-HTTP request may give as its Host,
// besides IP literals, which are always allowed.
//
// DNS rebinding: a web page at http://rebind.attacker.example:7700 has
// its name's DNS record turned to the agent's address after it loaded;
// the browser then sends the page's requests to the agent, as same-origin
// requests it lets the page read, with Host and Origin both naming the
// attacker's domain. Neither the cross-site check (refuseCrossSite: Origin
// matches Host) nor CORS can see it; only the Host can, as a name the
// agent does not go by. An attacker cannot rebind an IP literal, so any
// IP literal is allowed (as etcd does), which keeps every client that
// reaches the agent by address (the CLI's default, kubelet's probes,
// Prometheus scraping pod IPs) working without configuration. Over TLS the
// browser would refuse the agent's certificate for the attacker's name
// before sending anything, so HTTPS requests are not checked (as etcd).
type allowedHosts struct {
	any      bool
	names    map[string]bool
	suffixes []string // ".example.com" of "*.example.com"
}

// newAllowedHosts allows localhost, this machine's host name and extra
// (names; "*.example.com" allows every name under example.com; "*" turns
// the check off).
func newAllowedHosts(extra []string) allowedHosts {
	a := allowedHosts{names: map[string]bool{"localhost": true}}
	if h, err := os.Hostname(); err == nil && h != "" {
		a.names[canonicalHost(h)] = true
	}
	for _, e := range extra {
		switch e = canonicalHost(e); {
		case e == "*":
			a.any = true
		case strings.HasPrefix(e, "*."):
			a.suffixes = append(a.suffixes, e[1:])
		default:
			a.names[e] = true
		}
	}
	return a
}

// canonicalHost is name lower-cased, without a trailing dot (the DNS
// root, which browsers keep in Host).
func canonicalHost(name string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
}

// allows reports whether a request with this Host header (host or
// host:port; the port is not compared: a rebound page uses the agent's)
// may be served. An empty Host (HTTP/1.0) is not a browser's.
func (a allowedHosts) allows(hostport string) bool {
	if a.any || hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = canonicalHost(host)
	if a.names[host] {
		return true
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(host, s) && len(host) > len(s) {
			return true
		}
	}
	return false
}

// refuseHost answers 421 host_not_allowed, and reports true, when r came
// over plain HTTP naming a Host the agent does not go by.
func (a allowedHosts) refuseHost(w http.ResponseWriter, r *http.Request) bool {
	if r.TLS != nil || a.allows(r.Host) {
		return false
	}
	k := api.KindOfCode(api.CodeHostNotAllowed)
	writeJSON(w, k.Status, ErrorBody{Code: k.Code, Outcome: string(k.Outcome),
		Error: fmt.Sprintf("Host %q is not a name of this agent: over plain HTTP, name it by an IP address, localhost, its host name or a name given to -http-allowed-hosts (refused: a web page whose DNS name was rebound to the agent sends such requests)", r.Host)})
	return true
}

// ParseAllowedHosts reads -http-allowed-hosts: comma-separated DNS names
// (without port or scheme), "*.example.com" for every name under
// example.com, or "*" for any Host.
func ParseAllowedHosts(list string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name := strings.TrimPrefix(e, "*.")
		if e != "*" && (name == "" || strings.ContainsAny(name, ":/[]*@ ")) {
			return nil, fmt.Errorf("%q: want a DNS name without port or scheme (app.example.com), *.example.com, or *", e)
		}
		out = append(out, e)
	}
	return out, nil
}
