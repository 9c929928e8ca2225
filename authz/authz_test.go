package authz

import (
	"context"
	"errors"
	"testing"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/telemetry"
)

func TestResolver(t *testing.T) {
	tokens := map[string]*api.ACLToken{
		"reader": {Policies: []api.ACLPolicy{{Kind: api.ACLRead}}},
		"agent":  {Policies: []api.ACLPolicy{{Kind: api.ACLWrite}}, Node: "host1"},
	}
	lookup := func(_ context.Context, secret string) (*api.ACLToken, error) {
		if t, ok := tokens[secret]; ok {
			return t, nil
		}
		return nil, api.ErrACLNotFound
	}
	for _, tc := range []struct {
		name     string
		r        Resolver
		secret   string
		err      error
		write    bool // may register csi plugins of host9
		operator bool
		node     string
		noRead   bool
	}{
		{name: "ACLs off", r: Resolver{}, write: true, operator: true},
		{name: "ACLs off, any secret", r: Resolver{}, secret: "x", write: true, operator: true},
		{name: "static token presented", r: Resolver{StaticToken: "s3"}, secret: "s3", write: true, operator: true},
		{name: "static token, another presented", r: Resolver{StaticToken: "s3"}, secret: "s4"},
		{name: "static token, none presented", r: Resolver{StaticToken: "s3"}},
		{name: "default allow, anonymous", r: Resolver{ACLs: true, Tokens: lookup}, write: true, operator: true},
		{name: "default deny, anonymous", r: Resolver{ACLs: true, DefaultDeny: true, Tokens: lookup}, noRead: true},
		{name: "unknown token", r: Resolver{ACLs: true, Tokens: lookup}, secret: "nope", err: api.ErrACLNotFound},
		{name: "reader", r: Resolver{ACLs: true, DefaultDeny: true, Tokens: lookup}, secret: "reader"},
		{name: "agent token", r: Resolver{ACLs: true, DefaultDeny: true, Tokens: lookup}, secret: "agent", node: "host1"},
		{name: "no lookup", r: Resolver{ACLs: true}, secret: "reader", err: api.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.r.Resolve(context.Background(), tc.secret)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Resolve: %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			ctx := With(context.Background(), id)
			if got := registerErr(ctx, &api.PluginInfo{Type: "csi", NodeID: "host9"}) == nil; got != tc.write {
				t.Errorf("may register: %v, want %v", got, tc.write)
			}
			if got := Operator(ctx) == nil; got != tc.operator {
				t.Errorf("operator: %v, want %v", got, tc.operator)
			}
			if id.Node != tc.node {
				t.Errorf("node %q, want %q", id.Node, tc.node)
			}
			if got := Read(ctx, "csi") == nil; got == tc.noRead {
				t.Errorf("may read: %v, want %v", got, !tc.noRead)
			}
		})
	}
}

func registerErr(ctx context.Context, p *api.PluginInfo) error {
	_, err := Register(ctx, p)
	return err
}

func TestNoIdentityMayDoNothing(t *testing.T) {
	ctx := context.Background()
	if Read(ctx, "csi") == nil || ReadCluster(ctx) == nil || Operator(ctx) == nil || DeregisterNode(ctx, "n") == nil {
		t.Fatal("a context without an identity was allowed")
	}
}

func TestNodeBinding(t *testing.T) {
	write := api.TokenAuthorizer(&api.ACLToken{Policies: []api.ACLPolicy{{Kind: api.ACLWrite}}})
	csiOnly := api.TokenAuthorizer(&api.ACLToken{Policies: []api.ACLPolicy{{Kind: api.ACLWrite, Types: []string{"csi"}}}})
	bound := With(context.Background(), Identity{Grants: write, Node: "h1"})
	free := With(context.Background(), Identity{Grants: write})
	bound1Type := With(context.Background(), Identity{Grants: csiOnly, Node: "h1"})
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"register own", registerErr(bound, &api.PluginInfo{Type: "csi", NodeID: "h1"})},
		{"register any (unbound)", registerErr(free, &api.PluginInfo{Type: "csi", NodeID: "h2"})},
		{"deregister own node", DeregisterNode(bound, "h1")},
	} {
		if tc.err != nil {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"register other", registerErr(bound, &api.PluginInfo{Type: "csi", NodeID: "h2"})},
		{"register other type", registerErr(bound1Type, &api.PluginInfo{Type: "gpu", NodeID: "h1"})},
		{"deregister other node", DeregisterNode(bound, "h2")},
		{"deregister own node without write on every type", DeregisterNode(bound1Type, "h1")},
	} {
		if !errors.Is(tc.err, api.ErrPermissionDenied) {
			t.Errorf("%s: %v, want permission denied", tc.name, tc.err)
		}
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"a bound register is made conditional on its node", bound, "h1"},
		{"an unbound register stays plain", free, ""},
	} {
		rctx, err := Register(tc.ctx, &api.PluginInfo{Type: "csi", NodeID: "h1"})
		if got := backend.IfNodeID(rctx); err != nil || got != tc.want {
			t.Errorf("%s: condition %q, want %q (%v)", tc.name, got, tc.want, err)
		}
	}
	req, err := Deregister(bound, api.DeregisterRequest{Type: "csi", Name: "n", AllocID: "a"})
	if err != nil || req.IfNodeID != "h1" {
		t.Errorf("a bound deregister is made conditional on its node: %+v %v", req, err)
	}
	if _, err := Deregister(bound, api.DeregisterRequest{Type: "csi", Name: "n", AllocID: "a", IfNodeID: "h2"}); !errors.Is(err, api.ErrPermissionDenied) {
		t.Errorf("a bound deregister on another node's condition: %v", err)
	}
	req, err = Deregister(free, api.DeregisterRequest{Type: "csi", Name: "n", AllocID: "a"})
	if err != nil || req.IfNodeID != "" {
		t.Errorf("an unbound deregister stays as asked: %+v %v", req, err)
	}
}

// A renewal needs what a write of its type needs, and a node-bound
// caller's renewal is made conditional on its node, as its
// deregistrations are: the leader checks it against the lease it holds.
func TestRenewRule(t *testing.T) {
	write := api.TokenAuthorizer(&api.ACLToken{Policies: []api.ACLPolicy{{Kind: api.ACLWrite, Types: []string{"csi"}}}})
	read := api.TokenAuthorizer(&api.ACLToken{Policies: []api.ACLPolicy{{Kind: api.ACLRead}}})
	req := api.RenewRequest{Type: "csi", Name: "n", AllocID: "a"}
	for _, tc := range []struct {
		name   string
		id     Identity
		req    api.RenewRequest
		err    error
		ifNode string
	}{
		{name: "writer", id: Identity{Grants: write}, req: req},
		{name: "writer of another type", id: Identity{Grants: write}, req: api.RenewRequest{Type: "gpu", Name: "n", AllocID: "a"}, err: api.ErrPermissionDenied},
		{name: "reader", id: Identity{Grants: read}, req: req, err: api.ErrPermissionDenied},
		{name: "no identity", req: req, err: api.ErrPermissionDenied},
		{name: "node-bound", id: Identity{Grants: write, Node: "h1"}, req: req, ifNode: "h1"},
		{name: "node-bound, naming its node", id: Identity{Grants: write, Node: "h1"}, req: api.RenewRequest{Type: "csi", Name: "n", AllocID: "a", IfNodeID: "h1"}, ifNode: "h1"},
		{name: "node-bound, naming another", id: Identity{Grants: write, Node: "h1"}, req: api.RenewRequest{Type: "csi", Name: "n", AllocID: "a", IfNodeID: "h2"}, err: api.ErrPermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Renew(With(context.Background(), tc.id), tc.req)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Renew: %v, want %v", err, tc.err)
			}
			if err == nil && got.IfNodeID != tc.ifNode {
				t.Fatalf("IfNodeID %q, want %q", got.IfNodeID, tc.ifNode)
			}
		})
	}
}

// Every refusal is counted in plugreg_acl_denied_total.
func TestRefusalsAreCounted(t *testing.T) {
	sink := telemetry.NewSink()
	if err := telemetry.Use(sink); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if Operator(ctx) == nil || Read(ctx, "csi") == nil {
		t.Fatal("a context without an identity was allowed")
	}
	if n, ok := sink.Value("plugreg_acl_denied_total"); !ok || n != 2 {
		t.Fatalf("plugreg_acl_denied_total %v (%v), want 2", n, ok)
	}
}

// A host sync is checked as each of its single writes is: write on every
// type it registers or removes, and a node-bound caller's own node, whose
// registrations are then conditional on it.
func TestSyncHost(t *testing.T) {
	csiWriter := api.TokenAuthorizer(&api.ACLToken{Policies: []api.ACLPolicy{{Kind: api.ACLWrite, Types: []string{"csi"}}}})
	sync := func(node string, types ...string) api.HostSyncRequest {
		r := api.HostSyncRequest{NodeID: node}
		for i, ty := range types {
			if i%2 == 0 {
				r.Register = append(r.Register, &api.PluginInfo{Type: ty, NodeID: node})
			} else {
				r.Deregister = append(r.Deregister, api.HostDeregistration{Type: ty})
			}
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		id     Identity
		req    api.HostSyncRequest
		denied bool
		ifNode string
	}{
		{"everyone, unbound", Identity{Grants: api.AllowAll()}, sync("h1", "csi", "device"), false, ""},
		{"its own node", Identity{Grants: api.AllowAll(), Node: "h1"}, sync("h1", "csi", "device"), false, "h1"},
		{"another node", Identity{Grants: api.AllowAll(), Node: "h1"}, sync("h2", "csi"), true, ""},
		{"a type it may not register", Identity{Grants: csiWriter}, sync("h1", "csi", "csi", "device"), true, ""},
		{"a type it may not remove", Identity{Grants: csiWriter}, sync("h1", "csi", "device"), true, ""},
		{"no identity", Identity{}, sync("h1", "csi"), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, err := SyncHost(With(context.Background(), tc.id), tc.req)
			if denied := errors.Is(err, api.ErrPermissionDenied); denied != tc.denied || (err != nil && !denied) {
				t.Fatalf("err %v, want denied %v", err, tc.denied)
			}
			if err == nil && backend.IfNodeID(ctx) != tc.ifNode {
				t.Errorf("conditional on %q, want %q", backend.IfNodeID(ctx), tc.ifNode)
			}
		})
	}
}
