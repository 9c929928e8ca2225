package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/authz"
)

// A request's identity is resolved once, when it arrives (withIdentity);
// an event stream or a blocking query then runs for minutes, and a token
// checked only then would keep every stream it opened after its deletion
// (new requests refused, open ones delivering). So a
// long-running request with a token is bound to it: it is re-checked
// whenever the node's ACLs change and ends, with the refusal the same
// request would now get, once the token is gone or no longer allows it.

// aclRecheckEvery is how often a client agent re-checks the token of an
// open stream or blocking query. It has no replica of the tokens to
// watch; the re-check goes through its token cache, so a server is asked
// at most once per token per cache lifetime (agent.tokenTTL), and a
// deleted token ends its streams within about that lifetime.
const aclRecheckEvery = 2 * time.Second

// aclChanges is a backend that learns of ACL changes as they apply (a
// server: cluster.Backend).
type aclChanges interface {
	ACLChanged() <-chan struct{}
}

// boundToToken returns ctx bound to r's token: it ends, with the refusal
// as its cause (tokenRefusal), once the token no longer resolves or
// allowed (the request's own check, run with the token's new identity)
// refuses it. release stops the re-checks; call it when the request
// ends. A request without a token (or with ACLs off) has an identity
// that no ACL change alters, and is not watched.
func (s *Server) boundToToken(ctx context.Context, r *http.Request, allowed func(context.Context) error) (bound context.Context, release func()) {
	secret := requestToken(r)
	if !s.resolver.LooksUp(secret) {
		return ctx, func() {}
	}
	ctx, end := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.watchToken(ctx, secret, allowed); err != nil {
			_, body := classify(err)
			s.logger.Info("ending a request whose token was refused", "path", r.URL.Path, "code", body.Code)
			end(err)
		}
	}()
	return ctx, func() {
		end(nil)
		<-done
	}
}

// watchToken re-checks secret at every ACL change (on a client agent,
// every aclRecheckEvery) until ctx ends (nil) or the token is refused
// (the refusal).
func (s *Server) watchToken(ctx context.Context, secret string, allowed func(context.Context) error) error {
	changes, _ := s.cfg.Backend.(aclChanges)
	var tick <-chan time.Time // nil (never) on a server
	if changes == nil {
		t := time.NewTicker(aclRecheckEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		// The channel is taken before the check: a change between the
		// request's resolution and this check is then seen by the
		// check, one after it by the wait.
		var changed <-chan struct{} // nil (never) on a client agent
		if changes != nil {
			changed = changes.ACLChanged()
		}
		if err := s.recheckToken(ctx, secret, allowed); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick:
		}
	}
}

// recheckToken resolves secret again and runs allowed with its identity.
// Only a refusal is returned: a failure to ask (a client agent that lost
// its servers for a moment) leaves the request as it is, to be checked
// at the next change.
func (s *Server) recheckToken(ctx context.Context, secret string, allowed func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	id, err := s.resolver.Resolve(rctx, secret)
	if err == nil && allowed != nil {
		err = allowed(authz.With(rctx, id))
	}
	if isRefusal(err) {
		return err
	}
	if err != nil && ctx.Err() == nil {
		s.logger.Debug("re-checking a stream's token", "error", err)
	}
	return nil
}

// isRefusal reports whether err says the token may not (any more).
func isRefusal(err error) bool {
	return errors.Is(err, api.ErrACLNotFound) || errors.Is(err, api.ErrPermissionDenied)
}

// tokenRefusal is why ctx (from boundToToken) ended, if its token was
// refused; nil if it ended otherwise or not at all.
func tokenRefusal(ctx context.Context) error {
	if err := context.Cause(ctx); isRefusal(err) {
		return err
	}
	return nil
}

// mayReadTypes is the check of an event stream of types (none: every
// type, cut by the guard to what the token reads when it opened; tokens
// are never changed in place, so only its deletion ends such a stream).
func mayReadTypes(types []string) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, t := range types {
			if err := authz.Read(ctx, t); err != nil {
				return err
			}
		}
		return nil
	}
}

// mayRunQuery is the check of a blocking query, the one authz.Guard
// makes before it runs.
func mayRunQuery(q api.Query) func(context.Context) error {
	return func(ctx context.Context) error { return authz.ReadQuery(ctx, q) }
}

// streamError is the last event of a stream ended by err (api.EventError):
// the code and message of the HTTP error the request would now get.
func streamError(err error) *api.Event {
	_, body := classify(err)
	return &api.Event{EventType: api.EventError, Error: &api.StreamError{Code: body.Code, Message: body.Error}}
}
