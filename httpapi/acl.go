package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/plugreg/plugreg/api"
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

// ACLBackend is what an agent that enforces ACLs serves; servers
// implement it (cluster.Backend), client agents too, through a server.
type ACLBackend interface {
	// ResolveToken returns the token whose secret is secret, or an error
	// wrapping api.ErrACLNotFound. It never puts secret in an error.
	ResolveToken(ctx context.Context, secret string) (*api.ACLToken, error)
	ACLBootstrap(ctx context.Context) (api.ACLTokenSecret, error)
	ACLTokenCreate(ctx context.Context, req api.ACLTokenCreateRequest) (api.ACLTokenSecret, error)
	ACLTokens(ctx context.Context) ([]api.ACLToken, error)
	ACLTokenDelete(ctx context.Context, accessorID string) (api.WriteResult, error)
}

type authzKey struct{}

// authz is the request's Authorizer (set by withAuthz).
func authz(r *http.Request) api.Authorizer {
	if a, ok := r.Context().Value(authzKey{}).(api.Authorizer); ok {
		return a
	}
	return api.DenyAll()
}

// openRoutes answer whatever the token: load balancers' health checks,
// the leader's address, and bootstrap (which only ever works once).
var openRoutes = map[string]bool{
	"GET /v1/health":         true,
	"GET /v1/status/leader":  true,
	"PUT /v1/acl/bootstrap":  true,
	"POST /v1/acl/bootstrap": true,
}

// withAuthz resolves the request's token into an Authorizer once, before
// the route runs. An unknown token is refused at once (403, acl_not_found)
// except on the open routes, which then run as anonymous.
func (s *Server) withAuthz(pattern string, w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	a, err := s.resolve(r)
	if err != nil {
		if !openRoutes[pattern] {
			writeError(w, err)
			return nil, false
		}
		a = s.anonymous()
	}
	ctx := context.WithValue(r.Context(), authzKey{}, a)
	if secret := r.Header.Get(headerToken); secret != "" && s.cfg.ACL.Enabled {
		// A client agent forwards writes to a server, which checks the
		// caller's token again (api.RegisterArgs.Token).
		ctx = api.WithToken(ctx, secret)
	}
	return r.WithContext(ctx), true
}

func (s *Server) anonymous() api.Authorizer {
	if s.cfg.ACL.DefaultDeny {
		return api.DenyAll()
	}
	return api.AllowAll()
}

func (s *Server) resolve(r *http.Request) (api.Authorizer, error) {
	if !s.cfg.ACL.Enabled {
		return api.AllowAll(), nil
	}
	secret := r.Header.Get(headerToken)
	if secret == "" {
		return s.anonymous(), nil
	}
	ab, ok := s.be.(ACLBackend)
	if !ok {
		return api.DenyAll(), fmt.Errorf("%w: this agent cannot resolve ACL tokens", api.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	t, err := ab.ResolveToken(ctx, secret)
	if err != nil {
		return api.DenyAll(), err
	}
	return api.TokenAuthorizer(t), nil
}

// denied answers 403 permission_denied, naming what was asked (never the
// token).
func denied(w http.ResponseWriter, what string) {
	writeError(w, fmt.Errorf("%w: the request's token may not %s", api.ErrPermissionDenied, what))
}

// allowed checks ok and answers 403 when it is false.
func allowed(w http.ResponseWriter, ok bool, what string) bool {
	if !ok {
		denied(w, what)
	}
	return ok
}

// operatorOnly wraps an operator route.
func operatorOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if allowed(w, authz(r).IsOperator(), "make operator calls (operator policy)") {
			h(w, r)
		}
	}
}

// anyPolicy wraps a route that shows the cluster (members, peers,
// metrics): any token with a policy, or anonymous under default allow.
func anyPolicy(h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if allowed(w, authz(r).CanReadAny(), "read cluster status (any policy)") {
			h.ServeHTTP(w, r)
		}
	}
}

// filterPlugins keeps the instances of types a may read.
func filterPlugins(a api.Authorizer, in []*api.PluginInfo) []*api.PluginInfo {
	if a.CanReadAll() {
		return in
	}
	out := make([]*api.PluginInfo, 0, len(in))
	for _, p := range in {
		if a.CanRead(p.Type) {
			out = append(out, p)
		}
	}
	return out
}

// filterEvent returns ev as a may see it: nil for a change of a type it may
// not read, a reset cut to the types it may read (without the shared
// Memo, whose encoding holds them all).
func filterEvent(a api.Authorizer, ev *api.Event) *api.Event {
	switch {
	case ev.EventType == api.EventHeartbeat || a.CanReadAll():
		return ev
	case ev.EventType == api.EventReset:
		c := *ev
		c.Memo = nil
		c.Plugins = filterPlugins(a, ev.Plugins)
		return &c
	case ev.Info != nil && !a.CanRead(ev.Info.Type):
		return nil
	}
	return ev
}

func (s *Server) aclBackend(w http.ResponseWriter) (ACLBackend, bool) {
	ab, ok := s.be.(ACLBackend)
	if !ok || !s.cfg.ACL.Enabled {
		writeError(w, fmt.Errorf("%w: ACLs are not enabled on this agent (-acl-enabled)", api.ErrUnsupported))
		return nil, false
	}
	return ab, true
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
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	req, err := decodeTokenCreate(r.Body)
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
	if err := api.ValidatePolicies(req.Policies); err != nil {
		return nil, err
	}
	if err := api.ValidateDescription(req.Description); err != nil {
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
	secret := r.Header.Get(headerToken)
	if secret == "" {
		writeError(w, fmt.Errorf("%w: no X-Plugreg-Token in the request", api.ErrACLNotFound))
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
	if err := api.ValidateIdentifier("accessor", id); err != nil {
		writeError(w, err)
		return
	}
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
