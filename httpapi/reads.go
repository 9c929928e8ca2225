package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/plugreg/plugreg/api"
)

// The read handlers: a query's parameters, its consistency and blocking,
// and the lists, instances, coverage and a node's plugins it answers.

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
