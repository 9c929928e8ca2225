package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
	"syscall"
)

// The client's own errors: what no node said, because none answered as a
// plugreg agent. Errors a node answers are api's (see APIError).
var (
	// ErrNoAgent: every address refused the connection, has no route to
	// it, or names a host that does not exist, and this Client never had an
	// agent's answer: nothing listens there, so the call fails at once
	// rather than retrying until its context ends. Once a Client has been
	// answered, refusals are agents restarting (a rolling restart refuses
	// every address in turn) and are retried as any transient failure.
	// The error names the addresses and also matches the system's error
	// (errors.Is(err, syscall.ECONNREFUSED)).
	ErrNoAgent = errors.New("client: no plugreg agent at the address (is it running? Config.Addrs, PLUGREG_ADDR)")
	// ErrNotPlugreg: an address answered HTTP, but not as a plugreg agent
	// does (an HTML page, or an error without plugreg's JSON code): another
	// service (a Consul agent, a web server) listens on that port.
	ErrNotPlugreg = errors.New("client: the answer is not a plugreg agent's (is it the right address?)")
)

// noAgentError is ErrNoAgent for some addresses, with why each failed.
type noAgentError struct {
	addrs []string
	errs  []error
}

func (e *noAgentError) Error() string {
	reasons := make([]string, len(e.errs))
	same := true
	for i, err := range e.errs {
		reasons[i] = connectFailure(err)
		same = same && reasons[i] == reasons[0]
	}
	if same {
		return fmt.Sprintf("no plugreg agent at %s: %s", strings.Join(e.addrs, ", "), reasons[0])
	}
	parts := make([]string, len(e.addrs))
	for i, a := range e.addrs {
		parts[i] = a + " (" + reasons[i] + ")"
	}
	return "no plugreg agent at " + strings.Join(parts, ", ")
}

func (e *noAgentError) Is(target error) bool { return target == ErrNoAgent }
func (e *noAgentError) Unwrap() []error      { return e.errs }

// connectFailure is the short reason a connection failed: the system's
// words ("connection refused"), without the dial's addresses.
func connectFailure(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.Err + " (" + dns.Name + ")"
	}
	return err.Error()
}

// nobodyListens reports whether a request failed because nothing listens
// at its address: the connection was refused, there is no route to the
// host, or the host name does not exist. Waiting does not change these as
// it does a node restarting behind others, a dial timeout or a reset.
func nobodyListens(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// notPlugregError is ErrNotPlugreg: what answered at addr instead.
type notPlugregError struct {
	addr        string
	status      int
	contentType string
}

func (e *notPlugregError) Error() string {
	ct := e.contentType
	if ct == "" {
		ct = "no Content-Type"
	}
	return fmt.Sprintf("%s answered HTTP %d (%s), not as a plugreg agent: is it the right address?", e.addr, e.status, ct)
}

func (e *notPlugregError) Is(target error) bool { return target == ErrNotPlugreg }

// notPlugreg is the error of an answer that no plugreg agent gives (nil
// for one it may): an HTML page, whatever its status, or an error status
// whose body is not plugreg's JSON error (httpapi.ErrorBody, which always
// has a code). body is the answer's body, or its start. The one error
// answer plugreg gives without a code is autopilot's 429 of an unhealthy
// cluster, whose body is the health: a 429 in JSON passes.
func notPlugreg(addr string, resp *http.Response, body []byte) error {
	if resp.StatusCode == http.StatusBadRequest && bytes.HasPrefix(body, []byte(httpToHTTPS)) {
		return httpsOnlyError(addr)
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	bad := mt == "text/html"
	if resp.StatusCode >= 400 && !bad {
		var eb struct {
			Code string `json:"code"`
		}
		switch {
		case mt != "application/json":
			bad = true
		case resp.StatusCode == http.StatusTooManyRequests:
		default:
			bad = json.Unmarshal(body, &eb) != nil || eb.Code == ""
		}
	}
	if !bad {
		return nil
	}
	return &notPlugregError{addr: addr, status: resp.StatusCode, contentType: ct}
}

// httpsOnlyError: the address serves HTTPS, and was sent plain HTTP.
type httpsOnlyError string

func (addr httpsOnlyError) Error() string {
	return fmt.Sprintf("%s serves HTTPS, not HTTP: address it as https://%s (and give its CA: Config.TLS, PLUGREG_CACERT)", string(addr), string(addr))
}

// wrongAnswer reports whether err is an answer no plugreg agent gives at
// that address as it was addressed (notPlugreg's errors).
func wrongAnswer(err error) bool {
	var h httpsOnlyError
	return errors.Is(err, ErrNotPlugreg) || errors.As(err, &h)
}

// httpToHTTPS starts the answer of Go's HTTPS server (a plugreg agent's
// among them) to a request in plain HTTP.
const httpToHTTPS = "Client sent an HTTP request to an HTTPS server"

// hostOf is how errors name an address: as configured, without the
// default scheme.
func hostOf(addr string) string { return strings.TrimPrefix(addr, "http://") }

// unreachable is the error of a call that every address failed for a
// reason waiting does not cure (failed, one per address): those where
// nothing listens as one ErrNoAgent, then the others (answers not
// plugreg's, TLS refusals) as they are. It matches each of its parts.
func unreachable(addrs []string, failed map[string]error) error {
	var (
		none  noAgentError
		parts []error
	)
	for _, a := range addrs {
		err, ok := failed[a]
		if !ok {
			continue
		}
		if nobodyListens(err) {
			none.addrs = append(none.addrs, hostOf(a))
			none.errs = append(none.errs, err)
			continue
		}
		parts = append(parts, err)
	}
	if len(none.addrs) > 0 {
		parts = append([]error{&none}, parts...)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return &joined{parts}
}

// joined is errors.Join's, on one line.
type joined struct{ errs []error }

func (e *joined) Error() string {
	s := make([]string, len(e.errs))
	for i, err := range e.errs {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (e *joined) Unwrap() []error { return e.errs }
