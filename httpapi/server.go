package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
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

func (s *Server) writeContext(r *http.Request) (context.Context, context.CancelFunc, error) {
	ctx, err := withRequestID(r)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	return ctx, cancel, nil
}

// withRequestID returns r's context with the write's request ID, if it
// sent one (api.WithRequestID).
func withRequestID(r *http.Request) (context.Context, error) {
	id := r.Header.Get(headerRequest)
	if id == "" {
		return r.Context(), nil
	}
	if len(id) > maxRequestID {
		return nil, fmt.Errorf("%w: %s is %d bytes, at most %d", api.ErrTooLarge, headerRequest, len(id), maxRequestID)
	}
	return api.WithRequestID(r.Context(), id), nil
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	info, err := decodePlugin(r) // the body is bounded by the route's access
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	res, err := s.be.Register(ctx, info)
	s.writeResult(w, res, err)
}

// decodeJSON decodes exactly one JSON value of v's type from body, with no
// field v does not have.
func decodeJSON(body io.Reader, v interface{}) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return fmt.Errorf("%w: more than one JSON value in the body", api.ErrInvalid)
	}
	return nil
}

// decodePlugin decodes and validates a registration body, JSON or
// protobuf by its Content-Type: what it returns may be proposed as is (a
// bad request is answered without a round trip).
func decodePlugin(r *http.Request) (*api.PluginInfo, error) {
	info := new(api.PluginInfo)
	if isPluginProtobuf(r.Header.Get("Content-Type")) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, decodeError(err)
		}
		if info, err = pluginpb.DecodePlugin(b); err != nil {
			return nil, fmt.Errorf("%w: protobuf body: %v", api.ErrInvalid, err)
		}
	} else if err := decodeJSON(r.Body, info); err != nil {
		return nil, err
	}
	if err := api.ValidateNewPlugin(info); err != nil {
		return nil, err
	}
	return info, nil
}

func isPluginProtobuf(contentType string) bool {
	if len(contentType) < len(api.PluginProtobuf) || !strings.EqualFold(contentType[:len(api.PluginProtobuf)], api.PluginProtobuf) {
		return false // the common case, without parsing
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == api.PluginProtobuf
}

func decodeError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: body over %d bytes", api.ErrTooLarge, maxBodyBytes)
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: empty body; want a PluginInfo JSON object", api.ErrInvalid)
	}
	return fmt.Errorf("%w: body: %v", api.ErrInvalid, err)
}

// deregister: DELETE /v1/plugins/{type}/{name}/{alloc}[?node=N][&index=M].
// With node and/or index it is conditional: 409 when the instance belongs
// to another node or was changed after index.
func (s *Server) deregister(w http.ResponseWriter, r *http.Request) {
	req := api.DeregisterRequest{Type: r.PathValue("type"), Name: r.PathValue("name"), AllocID: r.PathValue("alloc")}
	v := r.URL.Query()
	if _, ok := v["node"]; ok {
		if req.IfNodeID = v.Get("node"); req.IfNodeID == "" {
			writeError(w, fmt.Errorf("%w: node is empty", api.ErrInvalid))
			return
		}
	}
	if str := v.Get("index"); str != "" {
		n, err := strconv.ParseUint(str, 10, 64)
		if err != nil || n == 0 {
			writeError(w, fmt.Errorf("%w: index %q: want the instance's ModifyIndex, a positive number", api.ErrInvalid, str))
			return
		}
		req.IfModifyIndex = n
	}
	if err := req.Validate(); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	res, err := s.be.Deregister(ctx, req)
	s.writeResult(w, res, err)
}

// renew: PUT /v1/plugins/{type}/{name}/{alloc}/renew, no body. The
// leader moves the instance's lease a TTL on and answers {"TTL": "30s"};
// nothing is written to the log. 404 when it holds no such lease.
func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	req := api.RenewRequest{Type: r.PathValue("type"), Name: r.PathValue("name"), AllocID: r.PathValue("alloc")}
	if err := req.Validate(); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
	defer cancel()
	res, err := s.be.Renew(ctx, req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) deregisterNode(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	if err := api.ValidateIdentifier("node", r.PathValue("node")); err != nil {
		writeError(w, err)
		return
	}
	res, err := s.be.DeregisterNode(ctx, r.PathValue("node"))
	s.writeResult(w, res, err)
}

func (s *Server) writeResult(w http.ResponseWriter, res api.WriteResult, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set(headerIndex, strconv.FormatUint(res.Index, 10))
	writeJSON(w, http.StatusOK, res)
}

// parseQuery reads a GET's consistency and blocking parameters into q.
func parseQuery(r *http.Request, q *api.Query) error {
	v := r.URL.Query()
	switch c := v.Get("consistency"); c {
	case "", "linearizable":
		q.Consistency = api.Linearizable
	case "stale":
		q.Consistency = api.Stale
	default:
		return fmt.Errorf("%w: consistency %q: want linearizable or stale", api.ErrInvalid, c)
	}
	if _, ok := v["stale"]; ok { // Consul's spelling
		q.Consistency = api.Stale
	}
	if s := v.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: index %q is not a number", api.ErrInvalid, s)
		}
		q.MinIndex = n
		q.Wait = defaultWait
	}
	if s := v.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("%w: wait %q: want a duration such as 30s", api.ErrInvalid, s)
		}
		q.Wait = min(d, maxWait)
	}
	return nil
}

// read answers a GET: it validates the query, asks the backend (which
// blocks while asked to, then reads at the requested consistency), and
// sets the index headers.
func (s *Server) read(w http.ResponseWriter, r *http.Request, q api.Query, body func(*api.QueryResult) interface{}) {
	res, ok := s.query(w, r, q)
	if ok {
		writeJSON(w, http.StatusOK, body(res))
	}
}

// query runs q for a read handler and sets the answer's headers; on
// failure it has written the error and reports false.
func (s *Server) query(w http.ResponseWriter, r *http.Request, q api.Query) (*api.QueryResult, bool) {
	if err := parseQuery(r, &q); err != nil {
		writeError(w, err)
		return nil, false
	}
	if err := q.Validate(); err != nil {
		writeError(w, err)
		return nil, false
	}
	if q.MinIndex > 0 && q.Wait > 0 {
		if !s.blockingSlots.take() {
			writeError(w, limited("blocking queries", "blocking_queries"))
			return nil, false
		}
		defer s.blockingSlots.release()
	}
	// A blocking query may wait minutes: Shutdown ends it.
	ctx, cancel := context.WithTimeout(r.Context(), q.Wait+readTimeout)
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	if q.MinIndex > 0 && q.Wait > 0 {
		var release func()
		ctx, release = s.boundToToken(ctx, r, mayRunQuery(q))
		defer release()
	}
	res, err := s.be.Query(ctx, q)
	if refused := tokenRefusal(ctx); refused != nil {
		writeError(w, refused) // what it waited for is no longer the caller's to read
		return nil, false
	}
	if res != nil {
		setMeta(w, res)
		w.Header().Set(headerIndex, strconv.FormatUint(res.Index, 10))
	}
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return res, true
}

func setMeta(w http.ResponseWriter, res *api.QueryResult) {
	w.Header().Set(headerLeader, strconv.FormatBool(res.KnownLeader))
	ms := res.LastContact.Milliseconds()
	if res.LastContact < 0 {
		ms = -1 // never heard from a leader
	}
	w.Header().Set(headerContact, strconv.FormatInt(ms, 10))
}

func (s *Server) types(w http.ResponseWriter, r *http.Request) {
	s.read(w, r, api.Query{Kind: api.QueryTypes}, func(res *api.QueryResult) interface{} { return nonNilTypes(res.Types) })
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	s.writeList(w, r, api.Query{Kind: api.QueryList, Type: typ}, byName, typ)
}

func (s *Server) instances(w http.ResponseWriter, r *http.Request) {
	q := api.Query{Kind: api.QueryInstances, Type: r.PathValue("type"), Name: r.PathValue("name")}
	s.writeList(w, r, q, byRecency, "")
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	q := api.Query{Kind: api.QueryInstance, Type: r.PathValue("type"), Name: r.PathValue("name"), AllocID: r.PathValue("alloc")}
	s.read(w, r, q, func(res *api.QueryResult) interface{} {
		if len(res.Plugins) == 0 {
			return nil
		}
		return res.Plugins[0]
	})
}

// coverage: GET /v1/coverage/{type}[?role=client|server], which live
// nodes have an instance of the type and which lack one (api.Coverage).
// It reads every instance of the type (with the authorization, consistency
// and blocking of GET /v1/plugins/{type}), matched against this agent's
// gossip view: a client agent reads the instances through a server and
// the members from its own gossip, which is the same pool.
func (s *Server) coverage(w http.ResponseWriter, r *http.Request) {
	typ, role := r.PathValue("type"), r.URL.Query().Get("role")
	if err := api.ValidateCoverageRole(role); err != nil {
		writeError(w, err)
		return
	}
	res, ok := s.query(w, r, api.Query{Kind: api.QueryTypeInstances, Type: typ})
	if !ok {
		return
	}
	// Reading the type was allowed, which takes a policy: the guard's
	// Members (any policy) answers too.
	writeJSON(w, http.StatusOK, api.NewCoverage(typ, role, s.be.Members(r.Context()), res.Plugins))
}

// nodePlugins: GET /v1/nodes/{node}/plugins, every instance of a node.
func (s *Server) nodePlugins(w http.ResponseWriter, r *http.Request) {
	q := api.Query{Kind: api.QueryNode, NodeID: r.PathValue("node")}
	s.writeList(w, r, q, byNodeKey, "")
}

// nonNil returns in, or an empty slice for nil (JSON [] rather than null).
func nonNil(in []*api.PluginInfo) []*api.PluginInfo {
	if in == nil {
		return []*api.PluginInfo{}
	}
	return in
}

func nonNilTypes(in []string) []string {
	if in == nil {
		return []string{}
	}
	return in
}

func (s *Server) leader(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.be.Leader())
}

func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	peers, err := s.be.Peers(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if peers == nil {
		peers = []string{}
	}
	writeJSON(w, http.StatusOK, peers)
}

func (s *Server) members(w http.ResponseWriter, r *http.Request) {
	if err := authz.ReadCluster(r.Context()); err != nil {
		writeError(w, err) // the guard answers an empty list; the route says why
		return
	}
	writeJSON(w, http.StatusOK, s.be.Members(r.Context()))
}

// health answers GET /v1/health: readiness (200 when the agent can serve
// reads and writes now: a server that knows a leader and has applied what
// it knows committed, a client agent that reaches a server; 503
// otherwise; ?ready says so explicitly), or with ?live liveness (200
// whenever the process serves HTTP), for supervisors that must not
// restart an agent that merely waits for a leader. An agent with
// RequiredTypes is also not ready while its node lacks one of them.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	h := s.be.Health()
	if h.Status == "ok" && len(s.cfg.RequiredTypes) > 0 {
		s.checkRequiredTypes(r.Context(), &h)
	}
	if r.URL.Query().Has("live") {
		writeJSON(w, http.StatusOK, h)
		return
	}
	status := http.StatusOK
	if h.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

// checkRequiredTypes sets h's status to missing_required_types (naming
// them in MissingTypes) while this node has no instance of one of
// RequiredTypes (a suspect instance does not count). It reads the node's instances from the answering
// server's state (stale: a health check must not wait on the leader, and
// an agent that reaches no server is already not ready); a failed read
// is reported as such, not as ready.
func (s *Server) checkRequiredTypes(ctx context.Context, h *api.Health) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	// The agent's own check, not the caller's read: health is open.
	res, err := s.cfg.Backend.Query(ctx, api.Query{Kind: api.QueryNode, NodeID: s.cfg.Backend.NodeID(), Consistency: api.Stale})
	if err != nil {
		h.Status, h.Reason = "required_types_unknown", fmt.Sprintf("reading this node's plugins: %v", err)
		return
	}
	has := map[string]bool{}
	for _, p := range res.Plugins {
		// A suspect instance covers nothing, here as in coverage.
		has[p.Type] = has[p.Type] || !p.Suspect()
	}
	for _, t := range s.cfg.RequiredTypes {
		if !has[t] {
			h.MissingTypes = append(h.MissingTypes, t)
		}
	}
	if len(h.MissingTypes) > 0 {
		h.Status = "missing_required_types"
		h.Reason = fmt.Sprintf("node %s has no instance of the required plugin types %s", h.Node, strings.Join(h.MissingTypes, ", "))
	}
}

func (s *Server) leave(w http.ResponseWriter, r *http.Request) {
	if s.cfg.OnLeave == nil {
		writeError(w, fmt.Errorf("%w: this agent cannot be asked to leave over HTTP", api.ErrUnsupported))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Node": s.be.NodeID(), "Status": "leaving"})
	s.leaveOnce.Do(func() { go s.cfg.OnLeave() })
}

func (s *Server) transfer(w http.ResponseWriter, r *http.Request) {
	leader, err := s.be.TransferLeadership(r.Context())
	if err != nil {
		writeOperatorError(w, err, "transfer_failed")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Leader": leader})
}

func (s *Server) removePeer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := api.ValidateIdentifier("id", id); err != nil {
		writeError(w, err)
		return
	}
	if err := s.be.RemovePeer(r.Context(), id); err != nil {
		writeOperatorError(w, err, "remove_failed")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Removed": id})
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
