package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/authz"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Limits at the edge.
const (
	maxBodyBytes   = 128 * 1024 // a PluginInfo is at most 64 KiB of strings
	writeTimeout   = 15 * time.Second
	readTimeout    = 15 * time.Second
	maxWait        = api.MaxWait
	defaultWait    = 5 * time.Minute
	maxRequestID   = api.MaxRequestIDLen
	headerIndex    = "X-Plugreg-Index"
	headerLeader   = "X-Plugreg-Known-Leader"
	headerContact  = "X-Plugreg-Last-Contact"
	headerRequest  = "X-Plugreg-Request-Id"
	headerToken    = "X-Plugreg-Token"
	defaultHBEvery = 5 * time.Second

	defaultStreamWriteTimeout = 30 * time.Second
	defaultIdleTimeout        = 90 * time.Second
)

// Config of the HTTP API server.
type Config struct {
	// Backend is what the API serves; the server checks every call's
	// caller in front of it (authz.Guard).
	Backend backend.Backend
	Logger  hclog.Logger
	// Heartbeat is the event stream's heartbeat period (zero: 5s).
	Heartbeat time.Duration
	// StreamWriteTimeout bounds each write of an event stream: a client
	// that stops reading for this long is disconnected, so it cannot pin
	// a handler and its subscription forever (zero: 30s). The client
	// resumes from its last index when it reads again.
	StreamWriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has carried no
	// request for this long (zero: 90s); without it an idle connection
	// was held for good.
	IdleTimeout time.Duration
	// TLS, when set, makes the API HTTPS only (Serve takes the plain TCP
	// listener: connection limits count beneath TLS).
	TLS *tls.Config
	// Limits bound connections, streams, blocking queries and body reads
	// (zero fields: the defaults).
	Limits Limits
	// AllowedHosts are the names a plain-HTTP request's Host may give
	// besides IP literals, localhost and this machine's host name
	// (-http-allowed-hosts; "*.example.com", or "*" for any): others are
	// refused, against DNS rebinding (hosts.go).
	AllowedHosts []string
	// Metrics, if set, serves GET /v1/metrics.
	Metrics http.Handler
	// Token, when set with ACLs off, is required (header
	// X-Plugreg-Token) on every request that changes something: writes,
	// leave, operator calls (authz.Resolver.StaticToken).
	Token string
	// ACL turns token checks on every route on (see ACLConfig).
	ACL ACLConfig
	// Keyring, when set, is the agent's gossip keyring, served (to
	// operators) at /v1/agent/keyring.
	Keyring Keyring
	// UI, when set, serves the web UI under /ui/ (package ui); / sends
	// browsers there.
	UI http.Handler
	// RequiredTypes are plugin types this agent's node must have an
	// instance of to be ready (-required-plugin-types): GET /v1/health
	// answers 503 missing_required_types while one is missing.
	RequiredTypes []string
	// OnLeave is called (in its own goroutine) after PUT /v1/agent/leave
	// was answered; it should leave the cluster and stop the process.
	OnLeave func()
	// Tracer records a server span for each request, continuing the
	// caller's W3C traceparent (nil: tracing off, and traceparent is
	// neither read nor passed on).
	Tracer *tracing.Tracer
}

// Server is the HTTP API of one node.
type Server struct {
	cfg      Config
	be       backend.Backend // cfg.Backend behind authz.Guard
	resolver authz.Resolver
	http     *http.Server
	logger   hclog.Logger

	streams                    context.Context // cancelled by Shutdown to end event streams
	endStream                  context.CancelFunc
	leaveOnce                  sync.Once
	lists                      *listCache // encoded lists by type (listcache.go)
	streamSlots, blockingSlots slots      // Limits (limits.go)
	hosts                      allowedHosts
}

// New returns the API server; call Serve.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = defaultHBEvery
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = defaultStreamWriteTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = defaultIdleTimeout
	}
	s := &Server{cfg: cfg, be: authz.Guard(cfg.Backend), logger: cfg.Logger, lists: newListCache(), hosts: newAllowedHosts(cfg.AllowedHosts),
		resolver: authz.Resolver{ACLs: cfg.ACL.Enabled, DefaultDeny: cfg.ACL.DefaultDeny, StaticToken: cfg.Token, Tokens: cfg.Backend.ResolveToken}}
	cfg.Limits = cfg.Limits.withDefaults()
	s.cfg.Limits = cfg.Limits
	s.streamSlots, s.blockingSlots = newSlots(cfg.Limits.MaxStreams), newSlots(cfg.Limits.MaxBlockingQueries)
	s.streams, s.endStream = context.WithCancel(context.Background())
	s.http = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: cfg.IdleTimeout}
	return s
}

// Serve serves ln until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	ln = limitConns(ln, s.cfg.Limits.MaxConnsPerClient, s.cfg.TLS)
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown ends event streams and blocking queries and waits (up to ctx)
// for in-flight requests.
func (s *Server) Shutdown(ctx context.Context) error {
	s.endStream()
	return s.http.Shutdown(ctx)
}

// Close closes every connection at once, in-flight requests included.
func (s *Server) Close() error {
	s.endStream()
	return s.http.Close()
}

// access is what a route checks before it reads anything of its request
// but the headers: a caller that may not use the route is refused before a
// byte of its body is read, whatever it sends (a restore's archive is up
// to 512 MiB).
type access struct {
	// rule is the coarsest permission the route could ever need, checked
	// as soon as the caller is known (withIdentity); the route's own
	// checks follow (authz.Guard). Nil: the route is open to anyone.
	rule func(context.Context) error
	// body is the most of a body the route reads; zero: none. What is
	// beyond it is never read (Go's server closes the connection rather
	// than drain a large unread body).
	body int64
}

// The accesses of routes, by what they need.
var (
	open     = access{}
	reader   = access{rule: authz.ReadCluster} // any policy; each read checks its types
	writer   = access{rule: authz.WriteSome}   // write on some type; each write checks its type
	operator = access{rule: authz.Operator}
)

// withBody is a's access with a body of up to n bytes.
func (a access) withBody(n int64) access { a.body = n; return a }

// route is one of the API's routes: its pattern (http.ServeMux's), what it
// checks before it reads its request, and its handler.
type route struct {
	pattern string
	access  access
	handler http.Handler
}

// routes are the API's routes, each with its access: a route cannot be
// added without saying who may call it.
func (s *Server) routes() []route {
	h := func(pattern string, a access, f http.HandlerFunc) route { return route{pattern, a, f} }
	rs := []route{
		h("POST /v1/plugins", writer.withBody(maxBodyBytes), s.register),
		h("DELETE /v1/plugins/{type}/{name}/{alloc}", writer, s.deregister),
		h("PUT /v1/plugins/{type}/{name}/{alloc}/renew", writer, s.renew),
		h("DELETE /v1/nodes/{node}/plugins", writer, s.deregisterNode),
		h("GET /v1/nodes/{node}/plugins", reader, s.nodePlugins),
		h("GET /v1/types", reader, s.types),
		h("GET /v1/plugins/{type}", reader, s.list),
		h("GET /v1/plugins/{type}/{name}", reader, s.instances),
		h("GET /v1/plugins/{type}/{name}/{alloc}", reader, s.get),
		h("GET /v1/coverage/{type}", reader, s.coverage),
		h("GET /v1/events", reader, s.events),
		h("GET /v1/status/leader", open, s.leader),
		h("GET /v1/status/peers", reader, s.peers),
		h("GET /v1/members", reader, s.members),
		h("GET /v1/health", open, s.health),
		h("PUT /v1/agent/leave", operator, s.leave),
		h("POST /v1/operator/leadership-transfer", operator, s.transfer),
		h("DELETE /v1/operator/peers/{id}", operator, s.removePeer),
		h("POST /v1/operator/reap/resume", operator, s.resumeReaping),
		h("GET /v1/operator/autopilot/health", reader, s.autopilotHealth),
		h("GET /v1/agent/self", reader, s.agentSelf),
		h("GET /v1/operator/snapshot", operator, s.snapshotSave),
		h("PUT /v1/operator/snapshot", operator.withBody(maxSnapshotBody), s.snapshotRestore),
		h("GET /v1/agent/keyring", operator, s.keyring),
		h("POST /v1/agent/keyring", operator.withBody(maxKeyringBody), s.keyring),
		h("PUT /v1/agent/keyring", operator.withBody(maxKeyringBody), s.keyring),
		h("DELETE /v1/agent/keyring", operator.withBody(maxKeyringBody), s.keyring),
		// Bootstrap works once per cluster, for whoever comes first.
		h("PUT /v1/acl/bootstrap", open, s.aclBootstrap),
		h("POST /v1/acl/bootstrap", open, s.aclBootstrap),
		h("PUT /v1/acl/token", operator.withBody(maxBodyBytes), s.aclTokenCreate),
		h("GET /v1/acl/tokens", operator, s.aclTokens),
		// Any token may read itself, a token without policies too (the
		// route refuses a request without one).
		h("GET /v1/acl/token/self", open, s.aclTokenSelf),
		h("DELETE /v1/acl/token/{accessor}", operator, s.aclTokenDelete),
	}
	if s.cfg.UI != nil {
		// The UI's files hold no data (its requests carry the token), so
		// they need none.
		rs = append(rs,
			route{"GET /ui/", open, s.cfg.UI},
			route{"GET /ui", open, http.RedirectHandler("/ui/", http.StatusMovedPermanently)},
			route{"GET /{$}", open, http.RedirectHandler("/ui/", http.StatusFound)})
	}
	if s.cfg.Metrics != nil {
		rs = append(rs, route{"GET /v1/metrics", reader, s.cfg.Metrics})
	}
	return rs
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	accesses := map[string]access{}
	for _, rt := range s.routes() {
		mux.Handle(rt.pattern, rt.handler)
		accesses[rt.pattern] = rt.access
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hosts.refuseHost(w, r) {
			return
		}
		h, pattern := mux.Handler(r)
		if pattern == "" {
			// No route, or not with this method: the mux's own 404/405
			// (with its Allow header), in our JSON error shape.
			closeUnread(w, r)
			h.ServeHTTP(&jsonStatusWriter{ResponseWriter: w, r: r}, r)
			return
		}
		if err := refuseCrossSite(r); err != nil {
			refuse(w, r, err)
			return
		}
		bodyDeadline(w, r, s.cfg.Limits.BodyReadTimeout)
		if s.cfg.Tracer != nil {
			var span trace.Span
			w, r, span = s.startSpan(pattern, w, r)
			defer span.End()
		}
		r, ok := s.withIdentity(pattern, w, r)
		if !ok || !authorize(accesses[pattern], w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// authorize checks a's rule against r's caller before anything of r's body
// is read, and bounds what the route may read of it; on refusal it has
// answered and reports false.
func authorize(a access, w http.ResponseWriter, r *http.Request) bool {
	if a.rule != nil {
		if err := a.rule(r.Context()); err != nil {
			refuse(w, r, err)
			return false
		}
	}
	if a.body == 0 {
		closeUnread(w, r)
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, a.body)
	}
	return true
}

// refuse answers a request refused before its body was read, which is
// then never read.
func refuse(w http.ResponseWriter, r *http.Request, err error) {
	closeUnread(w, r)
	writeError(w, err)
}

// closeUnread ends the connection after the answer when the request came
// with a body that will not be read: Go's server would otherwise read up
// to 256 KiB of it to keep the connection.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}

// startSpan begins the server span of a request routed to pattern, under
// the caller's traceparent if it sent one; the span learns the response's
// status through the returned writer.
func (s *Server) startSpan(pattern string, w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, trace.Span) {
	ctx, span := s.cfg.Tracer.Start(tracing.FromHTTP(r.Context(), r.Header), pattern, trace.SpanKindServer)
	if !span.IsRecording() {
		return w, r.WithContext(ctx), span
	}
	span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", pattern),
		attribute.String("url.path", r.URL.Path))
	return &spanStatusWriter{ResponseWriter: w, span: span}, r.WithContext(ctx), span
}

// spanStatusWriter records the response status on the request's span.
type spanStatusWriter struct {
	http.ResponseWriter
	span    trace.Span
	written bool
}

func (w *spanStatusWriter) WriteHeader(status int) {
	if !w.written {
		w.written = true
		w.span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			w.span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *spanStatusWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (streams
// flush and set deadlines through it).
func (w *spanStatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ProbeHandler serves GET /v1/health alone, as the API does, for a
// listener of its own without TLS or tokens (the agent's -probe-port).
// kubelet's HTTP probes present no client certificate, so against an API
// that requires one (-verify-incoming) they could only test that the
// port is open, not that the agent knows a leader. Health is open on
// the API too (no token needed); nothing else is served here. Its Host is
// checked as the API's is (kubelet names the pod's IP).
func (s *Server) ProbeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.health)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.refuseHost(w, r) {
			mux.ServeHTTP(w, r)
		}
	})
}

// jsonStatusWriter replaces the mux's plain-text error body with ErrorBody.
type jsonStatusWriter struct {
	http.ResponseWriter
	r       *http.Request
	written bool
}

func (w *jsonStatusWriter) WriteHeader(status int) {
	if w.written {
		return
	}
	w.written = true
	k := api.KindOfCode(api.CodeNotFound)
	if status == http.StatusMethodNotAllowed {
		k = api.KindOfCode(api.CodeMethodNotAllowed)
	}
	w.Header().Del("X-Content-Type-Options")
	writeJSON(w.ResponseWriter, status, ErrorBody{Error: fmt.Sprintf("no route %s %s", w.r.Method, w.r.URL.Path), Code: k.Code, Outcome: string(k.Outcome)})
}

func (w *jsonStatusWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return len(b), nil // the mux's text body is replaced
}

// SplitTypes reads type lists given as repeated values, each a comma list
// (?type=a,b&type=c; -required-plugin-types a,b), leaving out empty items.
func SplitTypes(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}
