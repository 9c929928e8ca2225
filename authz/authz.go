// Package authz decides who may make which call, once for every edge.
//
// An edge (the HTTP API, the agent RPC on a server) proves its caller and
// resolves it into an Identity (Resolver), which it puts in the request's
// context; Guard wraps the agent's backend.Backend and checks every call
// against that identity before the backend sees it. The rules, and the
// words of every refusal, live here and nowhere else, as in Consul, whose
// endpoints each ask one authorizer.
//
// Three kinds of caller exist (docs/security.md): servers, proven by a
// certificate with the server name and checked by the transport before a
// server-only RPC is read (transport.Peer); client agents, proven by a
// certificate and acting with a token bound to their node; and users,
// with ACL tokens. This package covers the last two.
package authz

import (
	"context"
	"crypto/subtle"
	"fmt"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
)

// Identity is a caller as its edge proved it.
type Identity struct {
	// Grants is what the caller's policies allow (everything with ACLs
	// off, or for an anonymous caller under default allow).
	Grants api.Authorizer
	// Node, when set, binds the caller to one node: its token was an
	// agent token (api.ACLToken.Node).
	Node string
	// Accessor is the AccessorID of the caller's ACL token ("" without
	// one: ACLs off, or an anonymous caller).
	Accessor string
}

// Scope names the caller as far as its writes' request IDs go: a request
// ID answers only writes of the same scope (cluster's scopedRequestID).
// A node-bound caller is its node (its retries survive a rotation of the
// agent token); another token its accessor; a caller without a token ""
// (with ACLs off every caller may do everything, so sharing a scope gives
// none of them more).
func (id Identity) Scope() string {
	switch {
	case id.Node != "":
		return "node:" + id.Node
	case id.Accessor != "":
		return "token:" + id.Accessor
	}
	return ""
}

type identityKey struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// From returns the identity in ctx; a context without one may do nothing,
// so a call that skipped its edge's resolution is refused, not allowed.
func From(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

// Anyone is the identity of a caller the transport alone vouches for: a
// client agent's reads over the agent RPC (the agent filters what it
// forwards by its own callers' tokens) and internal calls.
func Anyone() Identity { return Identity{Grants: api.AllowAll()} }

// Resolver turns a presented secret into an Identity.
type Resolver struct {
	// ACLs turns token checks on; Tokens looks a secret up (required
	// then).
	ACLs   bool
	Tokens func(ctx context.Context, secret string) (*api.ACLToken, error)
	// DefaultDeny: a caller without a token may do nothing (else, with
	// ACLs on, everything: Consul's "allow", for migrating to ACLs).
	DefaultDeny bool
	// StaticToken (-acl-token, ACLs off): a caller presenting it may do
	// everything, others only read.
	StaticToken string
}

// readOnly is what a caller without the static token may do.
var readOnly = api.TokenAuthorizer(&api.ACLToken{Policies: []api.ACLPolicy{{Kind: api.ACLRead}}})

// Anonymous is the identity of a caller that presented no secret.
func (r Resolver) Anonymous() Identity {
	switch {
	case !r.ACLs && r.StaticToken != "":
		return Identity{Grants: readOnly}
	case r.ACLs && r.DefaultDeny:
		return Identity{Grants: api.DenyAll()}
	}
	return Identity{Grants: api.AllowAll()}
}

// LooksUp reports whether Resolve(secret) looks a token up (which may ask
// a server, so its caller bounds it with a deadline); otherwise it answers
// at once.
func (r Resolver) LooksUp(secret string) bool { return secret != "" && r.ACLs }

// Resolve returns the identity of a caller presenting secret ("" for
// none). An unknown token with ACLs on is an error wrapping
// api.ErrACLNotFound, which never quotes the secret.
func (r Resolver) Resolve(ctx context.Context, secret string) (Identity, error) {
	if secret == "" {
		return r.Anonymous(), nil
	}
	if !r.ACLs {
		if r.StaticToken != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(r.StaticToken)) == 1 {
			return Identity{Grants: api.AllowAll()}, nil
		}
		return r.Anonymous(), nil
	}
	if r.Tokens == nil {
		return Identity{}, fmt.Errorf("%w: this agent cannot resolve ACL tokens", api.ErrUnsupported)
	}
	t, err := r.Tokens(ctx, secret)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Grants: api.TokenAuthorizer(t), Node: t.Node, Accessor: t.AccessorID}, nil
}

// deny is the one shape of a refusal: 403 permission_denied naming what was
// asked, never the token.
// Each is counted in plugreg_acl_denied_total.
func deny(what string) error {
	metrics.IncrCounter([]string{"acl", "denied"}, 1)
	return fmt.Errorf("%w: the request's token may not %s", api.ErrPermissionDenied, what)
}

func check(ok bool, what string) error {
	if ok {
		return nil
	}
	return deny(what)
}

// Operator checks an operator call (leave, leadership, peers, keyring,
// snapshots, ACL management).
func Operator(ctx context.Context) error {
	return check(From(ctx).Grants.IsOperator(), "make operator calls (operator policy)")
}

// ReadCluster checks a call that shows the cluster (members, peers,
// health, metrics): any policy will do.
func ReadCluster(ctx context.Context) error {
	return check(From(ctx).Grants.CanReadAny(), "read cluster status (any policy)")
}

// WriteSome checks what every write needs before its arguments say which
// type it writes: write on some type. An edge checks it before it reads
// a write's body (the type's own check follows: Register, Deregister).
func WriteSome(ctx context.Context) error {
	return check(From(ctx).Grants.CanWriteAny(), "write plugins of any type (write policy)")
}

// Read checks a read of typ's plugins or events.
func Read(ctx context.Context, typ string) error {
	return check(From(ctx).Grants.CanRead(typ), "read plugins of type "+typ)
}

// ReadQuery checks a query before it runs: a read of q's type when it
// names one; the listings of types and of a node's plugins are cut to
// what the caller may read instead (Guard.Query).
func ReadQuery(ctx context.Context, q api.Query) error {
	switch q.Kind {
	case api.QueryList, api.QueryInstances, api.QueryInstance, api.QueryTypeInstances:
		return Read(ctx, q.Type)
	}
	return nil
}

// Register checks a registration of p: write on its type and, for a
// node-bound caller, p on its node. It returns the context to register
// in: for a node-bound caller, one that makes the registration
// conditional on the instance it replaces belonging to the caller's node
// (backend.WithIfNodeID), checked where the entry is applied, as
// Deregister's condition is; otherwise the caller could move another
// node's instance (its endpoint, lease and health) to its own.
func Register(ctx context.Context, p *api.PluginInfo) (context.Context, error) {
	id := From(ctx)
	if !id.Grants.CanWrite(p.Type) {
		return ctx, deny("register plugins of type " + p.Type)
	}
	return boundToNode(ctx, id, p.NodeID, "register plugins")
}

// boundToNode lets a caller bound to a node (a client agent's token) write
// only for that node, and makes its registrations conditional on the
// instances they replace being that node's; any other caller writes as
// it is. what names the write in the refusal.
func boundToNode(ctx context.Context, id Identity, node, what string) (context.Context, error) {
	if id.Node == "" {
		return ctx, nil
	}
	if node != id.Node {
		return ctx, deny(fmt.Sprintf("%s of node %q (it is bound to node %q)", what, node, id.Node))
	}
	return backend.WithIfNodeID(ctx, id.Node), nil
}

// SyncHost checks a host's writes as each of its single writes is
// checked: write on every type it registers or removes and, for a
// node-bound caller, the request of its own node. It returns the context
// to write in: for a node-bound caller one that makes the registrations
// conditional (as Register's); the removals are conditional on the
// request's node whoever asks.
func SyncHost(ctx context.Context, req api.HostSyncRequest) (context.Context, error) {
	id := From(ctx)
	for _, p := range req.Register {
		if p != nil && !id.Grants.CanWrite(p.Type) {
			return ctx, deny("register plugins of type " + p.Type)
		}
	}
	for _, d := range req.Deregister {
		if !id.Grants.CanWrite(d.Type) {
			return ctx, deny("deregister plugins of type " + d.Type)
		}
	}
	return boundToNode(ctx, id, req.NodeID, "sync the plugins")
}

// Deregister checks a deregistration and returns the request to run: for a
// node-bound caller it is made conditional on the caller's node, so that
// the check is made where the entry is applied, against the instance as
// it is then (a check here would race a re-registration elsewhere).
func Deregister(ctx context.Context, req api.DeregisterRequest) (api.DeregisterRequest, error) {
	id := From(ctx)
	if !id.Grants.CanWrite(req.Type) {
		return req, deny("deregister plugins of type " + req.Type)
	}
	err := bindToNode(id, &req.IfNodeID, "deregister plugins")
	return req, err
}

// bindToNode makes a node-bound caller's request conditional on its node
// (*ifNode, checked where the request takes effect), refusing one that
// names another node; a caller bound to no node leaves it as it is.
func bindToNode(id Identity, ifNode *string, what string) error {
	if id.Node == "" {
		return nil
	}
	if *ifNode != "" && *ifNode != id.Node {
		return deny(fmt.Sprintf("%s of node %q (it is bound to node %q)", what, *ifNode, id.Node))
	}
	*ifNode = id.Node
	return nil
}

// Renew checks a lease renewal, as Deregister checks a deregistration:
// write on its type, and for a node-bound caller the request made
// conditional on the caller's node, checked by the leader against the
// lease it holds.
func Renew(ctx context.Context, req api.RenewRequest) (api.RenewRequest, error) {
	id := From(ctx)
	if !id.Grants.CanWrite(req.Type) {
		return req, deny("renew the leases of plugins of type " + req.Type)
	}
	err := bindToNode(id, &req.IfNodeID, "renew the leases")
	return req, err
}

// DeregisterNode checks a deregistration of every plugin of nodeID: write
// on every type, and nodeID the caller's own node if it is bound to one.
func DeregisterNode(ctx context.Context, nodeID string) error {
	id := From(ctx)
	if !id.Grants.CanWriteAll() {
		return deny("deregister a node's plugins of every type (write on all types)")
	}
	if id.Node != "" && nodeID != id.Node {
		return deny(fmt.Sprintf("deregister the plugins of node %q (it is bound to node %q)", nodeID, id.Node))
	}
	return nil
}

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

// filterEvent returns ev as a may see it: nothing (false) for a change of
// a type it may not read, a reset cut to the types it may read (its own,
// without the shared encodings, which hold them all).
func filterEvent(a api.Authorizer, ev backend.Event) (backend.Event, bool) {
	switch {
	case ev.EventType == api.EventHeartbeat || a.CanReadAll():
		return ev, true
	case ev.EventType == api.EventReset:
		c := *ev.Event
		c.Plugins = filterPlugins(a, ev.Plugins)
		return backend.Unshared(&c), true
	case ev.Info != nil && !a.CanRead(ev.Info.Type):
		return backend.Event{}, false
	}
	return ev, true
}
