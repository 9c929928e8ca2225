package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/authz"
	"github.com/plugreg/plugreg/backend"
)

// ACLConfig turns the ACL system on for this agent's HTTP API.
type ACLConfig struct {
	// Enabled: every route checks the request's token (X-Plugreg-Token)
	// against the replicated tokens; off, every request may do anything
	// (and Config.Token, if set, still guards writes).
	Enabled bool
	// DefaultDeny: a request without a token may do nothing but read
	// /v1/health and /v1/status/leader and bootstrap the ACL system.
	// Otherwise (Consul's default, "allow") an anonymous request may do
	// everything, which is how a cluster is migrated to ACLs.
	DefaultDeny bool
}

// openRoutes answer whatever the token: load balancers' health checks,
// the leader's address, and bootstrap (which only ever works once).
var openRoutes = map[string]bool{
	"GET /v1/health":         true,
	"GET /v1/status/leader":  true,
	"PUT /v1/acl/bootstrap":  true,
	"POST /v1/acl/bootstrap": true,
}

// withIdentity resolves the request's token into its authz.Identity once,
// before the route runs; every call the route makes is checked against it
// (authz.Guard). An unknown token is refused at once (403, acl_not_found)
// except on the open routes, which then run as anonymous.
func (s *Server) withIdentity(pattern string, w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	secret := requestToken(r)
	ctx := r.Context()
	lookup := s.resolver.LooksUp(secret)
	if lookup {
		// Only a token lookup waits; a timer for every request without
		// one was 1 % of a server's CPU under write load.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readTimeout)
		defer cancel()
	}
	id, err := s.resolver.Resolve(ctx, secret)
	if err != nil {
		if !openRoutes[pattern] {
			refuse(w, r, err)
			return nil, false
		}
		id = s.resolver.Anonymous()
	}
	ctx = authz.With(r.Context(), id)
	if lookup {
		// A client agent forwards writes to a server, which checks the
		// caller's token again (agentrpc.RegisterArgs.Token).
		ctx = api.WithToken(ctx, secret)
	}
	return r.WithContext(ctx), true
}

// aclBackend refuses ACL routes on an agent without ACLs.
func (s *Server) aclBackend(w http.ResponseWriter) (backend.Backend, bool) {
	if !s.cfg.ACL.Enabled {
		writeError(w, fmt.Errorf("%w: ACLs are not enabled on this agent (-acl-enabled)", api.ErrUnsupported))
		return nil, false
	}
	return s.be, true
}

// aclBootstrap: PUT /v1/acl/bootstrap, once per cluster: the operator
// token, with its secret (shown only here).
func (s *Server) aclBootstrap(w http.ResponseWriter, r *http.Request) {
	ab, ok := s.aclBackend(w)
	if !ok {
		return
	}
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	t, err := ab.ACLBootstrap(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	s.logger.Info("ACL system bootstrapped", "accessor", t.AccessorID)
	writeJSON(w, http.StatusOK, t)
}

// aclTokenCreate: PUT /v1/acl/token with an ACLTokenCreateRequest.
func (s *Server) aclTokenCreate(w http.ResponseWriter, r *http.Request) {
	ab, ok := s.aclBackend(w)
	if !ok {
		return
	}
	req, err := decodeTokenCreate(r.Body) // bounded by its route's access
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
	t, err := ab.ACLTokenCreate(ctx, *req)
	if err != nil {
		writeError(w, err)
		return
	}
	s.logger.Info("ACL token created", "accessor", t.AccessorID)
	writeJSON(w, http.StatusOK, t)
}

// decodeTokenCreate decodes and validates a token create body.
func decodeTokenCreate(body io.Reader) (*api.ACLTokenCreateRequest, error) {
	var req api.ACLTokenCreateRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// aclTokens: GET /v1/acl/tokens, every token without its secret.
func (s *Server) aclTokens(w http.ResponseWriter, r *http.Request) {
	ab, ok := s.aclBackend(w)
	if !ok {
		return
	}
	ts, err := ab.ACLTokens(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if ts == nil {
		ts = []api.ACLToken{}
	}
	writeJSON(w, http.StatusOK, ts)
}

// aclTokenSelf: GET /v1/acl/token/self, the request's own token.
func (s *Server) aclTokenSelf(w http.ResponseWriter, r *http.Request) {
	ab, ok := s.aclBackend(w)
	if !ok {
		return
	}
	secret := requestToken(r)
	if secret == "" {
		writeError(w, fmt.Errorf("%w: no token in the request (X-Plugreg-Token or Authorization: Bearer)", api.ErrACLNotFound))
		return
	}
	t, err := ab.ResolveToken(r.Context(), secret)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// aclTokenDelete: DELETE /v1/acl/token/{accessor}.
func (s *Server) aclTokenDelete(w http.ResponseWriter, r *http.Request) {
	ab, ok := s.aclBackend(w)
	if !ok {
		return
	}
	id := r.PathValue("accessor")
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	res, err := ab.ACLTokenDelete(ctx, id)
	if err == nil {
		s.logger.Info("ACL token deleted", "accessor", id, "result", res.Result)
	}
	s.writeResult(w, res, err)
}

// requestToken is the request's token: X-Plugreg-Token, else an
// "Authorization: Bearer" header (as Consul reads both), which is what
// Prometheus and most HTTP tooling send from their configuration.
func requestToken(r *http.Request) string {
	if t := r.Header.Get(headerToken); t != "" {
		return t
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}
