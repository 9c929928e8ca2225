package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/registry"
)

// Limits at the edge.
const (
	maxBodyBytes   = 128 * 1024 // a PluginInfo is at most 64 KiB of strings
	writeTimeout   = 15 * time.Second
	readTimeout    = 15 * time.Second
	maxWait        = 10 * time.Minute
	defaultWait    = 5 * time.Minute
	maxRequestID   = fsm.MaxRequestIDLen
	headerIndex    = "X-Plugreg-Index"
	headerLeader   = "X-Plugreg-Known-Leader"
	headerContact  = "X-Plugreg-Last-Contact"
	headerRequest  = "X-Plugreg-Request-Id"
	headerToken    = "X-Plugreg-Token"
	defaultHBEvery = 5 * time.Second

	defaultStreamWriteTimeout = 30 * time.Second
)

// Config of the HTTP API server.
type Config struct {
	Server *cluster.Server
	Logger hclog.Logger
	// Heartbeat is the event stream's heartbeat period (zero: 5s).
	Heartbeat time.Duration
	// StreamWriteTimeout bounds each write of an event stream: a client
	// that stops reading for this long is disconnected, so it cannot pin
	// a handler and its subscription forever (zero: 30s). The client
	// resumes from its last index when it reads again.
	StreamWriteTimeout time.Duration
	// Metrics, if set, serves GET /v1/metrics.
	Metrics http.Handler
	// Token, when set, is required (header X-Plugreg-Token) on every
	// request that changes something: writes, leave, operator calls.
	Token string
	// OnLeave is called (in its own goroutine) after PUT /v1/agent/leave
	// was answered; it should leave the cluster and stop the process.
	OnLeave func()
}

// Server is the HTTP API of one node.
type Server struct {
	cfg    Config
	srv    *cluster.Server
	store  *registry.Store
	http   *http.Server
	logger hclog.Logger

	streams   context.Context // cancelled by Shutdown to end event streams
	endStream context.CancelFunc
	leaveOnce sync.Once
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
	s := &Server{cfg: cfg, srv: cfg.Server, store: cfg.Server.Store(), logger: cfg.Logger}
	s.streams, s.endStream = context.WithCancel(context.Background())
	s.http = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	return s
}

// Serve serves ln until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
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

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/plugins", s.authorized(s.register))
	mux.HandleFunc("DELETE /v1/plugins/{type}/{name}/{alloc}", s.authorized(s.deregister))
	mux.HandleFunc("DELETE /v1/nodes/{node}/plugins", s.authorized(s.deregisterNode))
	mux.HandleFunc("GET /v1/types", s.types)
	mux.HandleFunc("GET /v1/plugins/{type}", s.list)
	mux.HandleFunc("GET /v1/plugins/{type}/{name}", s.instances)
	mux.HandleFunc("GET /v1/plugins/{type}/{name}/{alloc}", s.get)
	mux.HandleFunc("GET /v1/events", s.events)
	mux.HandleFunc("GET /v1/status/leader", s.leader)
	mux.HandleFunc("GET /v1/status/peers", s.peers)
	mux.HandleFunc("GET /v1/members", s.members)
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("PUT /v1/agent/leave", s.authorized(s.leave))
	mux.HandleFunc("POST /v1/operator/leadership-transfer", s.authorized(s.transfer))
	mux.HandleFunc("DELETE /v1/operator/peers/{id}", s.authorized(s.removePeer))
	if s.cfg.Metrics != nil {
		mux.Handle("GET /v1/metrics", s.cfg.Metrics)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern == "" {
			// No route, or not with this method: the mux's own 404/405
			// (with its Allow header), in our JSON error shape.
			h.ServeHTTP(&jsonStatusWriter{ResponseWriter: w, r: r}, r)
			return
		}
		mux.ServeHTTP(w, r)
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
	code := CodeNotFound
	if status == http.StatusMethodNotAllowed {
		code = "method_not_allowed"
	}
	w.Header().Del("X-Content-Type-Options")
	writeJSON(w.ResponseWriter, status, ErrorBody{Error: fmt.Sprintf("no route %s %s", w.r.Method, w.r.URL.Path), Code: code})
}

func (w *jsonStatusWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return len(b), nil // the mux's text body is replaced
}

// authorized wraps a handler that changes state: with a Token configured,
// the request must carry it.
func (s *Server) authorized(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.Token == "" {
		return h
	}
	want := []byte(s.cfg.Token)
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(headerToken)), want) != 1 {
			writeJSON(w, http.StatusForbidden, ErrorBody{Error: "permission denied: a valid X-Plugreg-Token is required", Code: "permission_denied"})
			return
		}
		h(w, r)
	}
}

// WriteReply is the JSON answer to a successful write.
type WriteReply struct {
	Index  uint64
	Result fsm.Result
}

func (s *Server) writeContext(r *http.Request) (context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
	if id := r.Header.Get(headerRequest); id != "" {
		if len(id) > maxRequestID {
			cancel()
			return nil, nil, fmt.Errorf("%w: %s is %d bytes, at most %d", fsm.ErrTooLarge, headerRequest, len(id), maxRequestID)
		}
		ctx = registry.WithRequestID(ctx, id)
	}
	return ctx, cancel, nil
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var info fsm.PluginInfo
	if err := dec.Decode(&info); err != nil {
		writeError(w, decodeError(err))
		return
	}
	if dec.More() {
		writeError(w, fmt.Errorf("%w: more than one JSON value in the body", errBadRequest))
		return
	}
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	res, err := s.store.RegisterPlugin(ctx, &info)
	s.writeResult(w, res, err)
}

func decodeError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: body over %d bytes", fsm.ErrTooLarge, maxBodyBytes)
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: empty body; want a PluginInfo JSON object", errBadRequest)
	}
	return fmt.Errorf("%w: body: %v", errBadRequest, err)
}

func (s *Server) deregister(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	res, err := s.store.DeregisterPlugin(ctx, r.PathValue("type"), r.PathValue("name"), r.PathValue("alloc"))
	s.writeResult(w, res, err)
}

func (s *Server) deregisterNode(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	res, err := s.store.DeregisterNode(ctx, r.PathValue("node"))
	s.writeResult(w, res, err)
}

func (s *Server) writeResult(w http.ResponseWriter, res registry.WriteResult, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set(headerIndex, strconv.FormatUint(res.Index, 10))
	writeJSON(w, http.StatusOK, WriteReply{Index: res.Index, Result: res.Result})
}

// query holds a read's parameters.
type query struct {
	consistency cluster.Consistency
	index       uint64        // blocking: wait for a change after it
	wait        time.Duration // blocking: at most this long
}

func parseQuery(r *http.Request) (query, error) {
	q := query{}
	v := r.URL.Query()
	switch c := v.Get("consistency"); c {
	case "", "linearizable":
		q.consistency = cluster.Linearizable
	case "stale":
		q.consistency = cluster.Stale
	default:
		return q, fmt.Errorf("%w: consistency %q: want linearizable or stale", errBadRequest, c)
	}
	if _, ok := v["stale"]; ok { // Consul's spelling
		q.consistency = cluster.Stale
	}
	if s := v.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("%w: index %q is not a number", errBadRequest, s)
		}
		q.index = n
		q.wait = defaultWait
	}
	if s := v.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return q, fmt.Errorf("%w: wait %q: want a duration such as 30s", errBadRequest, s)
		}
		q.wait = min(d, maxWait)
	}
	return q, nil
}

// read answers a GET: it validates the query, blocks while asked to and
// nothing of types changed, reads at the requested consistency, and sets
// the index headers.
func (s *Server) read(w http.ResponseWriter, r *http.Request, types []string, serve func(*fsm.State) (interface{}, error)) {
	q, err := parseQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	for _, t := range types {
		if err := fsm.ValidateIdentifier("type", t); err != nil {
			writeError(w, err)
			return
		}
	}
	if q.index > 0 && q.wait > 0 {
		s.block(r.Context(), types, q.index, q.wait)
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	st, meta, err := s.srv.Read(ctx, q.consistency)
	setMeta(w, meta)
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := serve(st)
	w.Header().Set(headerIndex, strconv.FormatUint(st.Index(), 10))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func setMeta(w http.ResponseWriter, meta cluster.ReadMeta) {
	w.Header().Set(headerLeader, strconv.FormatBool(meta.KnownLeader))
	ms := meta.LastContact.Milliseconds()
	if meta.LastContact < 0 {
		ms = -1 // never heard from a leader
	}
	w.Header().Set(headerContact, strconv.FormatInt(ms, 10))
}

// block waits until an event of types (all types when empty) with an index
// past index has been applied here, or wait has passed.
func (s *Server) block(ctx context.Context, types []string, index uint64, wait time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// Shutdown ends the wait, so that it need not wait out a long poll.
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	ch, err := s.store.Watch(ctx, registry.Filter{Types: types}, index)
	if err != nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (s *Server) types(w http.ResponseWriter, r *http.Request) {
	s.read(w, r, nil, func(st *fsm.State) (interface{}, error) {
		return st.Types(), nil
	})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	t := r.PathValue("type")
	s.read(w, r, []string{t}, func(st *fsm.State) (interface{}, error) {
		return nonNil(st.List(t)), nil
	})
}

func (s *Server) instances(w http.ResponseWriter, r *http.Request) {
	t, n := r.PathValue("type"), r.PathValue("name")
	s.read(w, r, []string{t}, func(st *fsm.State) (interface{}, error) {
		list := st.Instances(t, n)
		if len(list) == 0 {
			return nil, fmt.Errorf("plugin %s/%s: %w", t, n, registry.ErrNotFound)
		}
		return nonNil(list), nil
	})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	t, n, a := r.PathValue("type"), r.PathValue("name"), r.PathValue("alloc")
	s.read(w, r, []string{t}, func(st *fsm.State) (interface{}, error) {
		p := st.Instance(t, n, a)
		if p == nil {
			return nil, fmt.Errorf("plugin %s/%s/%s: %w", t, n, a, registry.ErrNotFound)
		}
		return p, nil
	})
}

// nonNil returns in, or an empty slice for nil (JSON [] rather than null).
// The instances are the state's own and are only encoded, never changed.
func nonNil(in []*fsm.PluginInfo) []*fsm.PluginInfo {
	if in == nil {
		return []*fsm.PluginInfo{}
	}
	return in
}

func (s *Server) leader(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.srv.Leader())
}

func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	peers, err := s.srv.Peers()
	if err != nil {
		writeError(w, err)
		return
	}
	if peers == nil {
		peers = []string{}
	}
	writeJSON(w, http.StatusOK, peers)
}

// MemberJSON is one entry of GET /v1/members.
type MemberJSON struct {
	Name       string
	GossipAddr string
	RaftAddr   string
	HTTPAddr   string
	Status     string
	Leader     bool
	Voter      bool
}

func (s *Server) members(w http.ResponseWriter, r *http.Request) {
	voters := map[string]bool{}
	if servers, err := s.srv.RaftConfiguration(); err == nil {
		for _, srv := range servers {
			voters[string(srv.ID)] = srv.Suffrage == raft.Voter
		}
	}
	leader := s.srv.LeaderID()
	out := []MemberJSON{}
	for _, m := range s.srv.Members() {
		out = append(out, MemberJSON{
			Name: m.Name, GossipAddr: m.GossipAddr, RaftAddr: m.Meta.RaftAddr, HTTPAddr: m.Meta.HTTPAddr,
			Status: string(m.Status), Leader: m.Meta.ID == leader, Voter: voters[m.Meta.ID],
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// Health is the body of GET /v1/health.
type Health struct {
	Status            string // "ok", or "no_leader"
	Node              string
	Leader            string
	AppliedIndex      uint64
	RaftState         string // Leader, Follower, Candidate, Shutdown
	Term              uint64
	CommitIndex       uint64
	LastSnapshotIndex uint64
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	h := Health{Status: "ok", Node: s.srv.NodeID(), Leader: s.srv.Leader(), AppliedIndex: s.srv.AppliedIndex()}
	stats := s.srv.Stats()
	h.RaftState = stats["state"]
	h.Term, _ = strconv.ParseUint(stats["term"], 10, 64)
	h.CommitIndex, _ = strconv.ParseUint(stats["commit_index"], 10, 64)
	h.LastSnapshotIndex, _ = strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	status := http.StatusOK
	if h.Leader == "" {
		h.Status, status = "no_leader", http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

func (s *Server) leave(w http.ResponseWriter, r *http.Request) {
	if s.cfg.OnLeave == nil {
		writeJSON(w, http.StatusNotImplemented, ErrorBody{Error: "this agent cannot be asked to leave over HTTP", Code: "unsupported"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Node": s.srv.NodeID(), "Status": "leaving"})
	s.leaveOnce.Do(func() { go s.cfg.OnLeave() })
}

func (s *Server) transfer(w http.ResponseWriter, r *http.Request) {
	if err := s.srv.TransferLeadership(); err != nil {
		writeJSON(w, http.StatusConflict, ErrorBody{Error: err.Error(), Code: "transfer_failed"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Leader": s.srv.Leader()})
}

func (s *Server) removePeer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := fsm.ValidateIdentifier("id", id); err != nil {
		writeError(w, err)
		return
	}
	if err := s.srv.RemovePeer(id); err != nil {
		writeJSON(w, http.StatusConflict, ErrorBody{Error: err.Error(), Code: "remove_failed"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Removed": id})
}

func splitTypes(vals []string) []string {
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
