package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/plugreg/plugreg/api"
)

func token(accessor, secret string, ps ...api.ACLPolicy) ACLToken {
	return ACLToken{AccessorID: accessor, SecretHash: api.HashSecret(secret), Policies: ps}
}

var operator = api.ACLPolicy{Kind: api.ACLOperator}

// Bootstrap happens once; tokens are created and deleted, never changed in
// place; every refusal changes nothing.
func TestACLCommands(t *testing.T) {
	a := newApplier(t)
	steps := []struct {
		name string
		req  Request
		res  api.Result
		err  error
	}{
		{"a non-operator bootstrap token is invalid at the edge", nil, "", nil},
		{"bootstrap", &ACLBootstrapRequest{Token: token("root", "s0", operator)}, ResultCreated, nil},
		{"bootstrap again", &ACLBootstrapRequest{Token: token("root2", "s1", operator)}, "", api.ErrACLBootstrapped},
		{"create", &ACLTokenSetRequest{Token: token("reader", "s2", api.ACLPolicy{Kind: api.ACLRead, Types: []string{"csi-*"}})}, ResultCreated, nil},
		{"same accessor", &ACLTokenSetRequest{Token: token("reader", "s3", operator)}, "", api.ErrConflict},
		{"same secret", &ACLTokenSetRequest{Token: token("other", "s2", operator)}, "", api.ErrConflict},
		{"delete", &ACLTokenDeleteRequest{AccessorID: "reader"}, ResultDeleted, nil},
		{"delete again", &ACLTokenDeleteRequest{AccessorID: "reader"}, api.ResultAbsent, nil},
	}
	if _, err := EncodeCommand(&ACLBootstrapRequest{Token: token("x", "y", api.ACLPolicy{Kind: api.ACLRead})}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a read-only bootstrap token encoded: %v", err)
	}
	for _, st := range steps[1:] {
		before := a.snapshot()
		res := a.fsm.Apply(a.entry(st.req)).(*ApplyResult)
		if st.err != nil {
			if !errors.Is(res.Err, st.err) {
				t.Fatalf("%s: %v, want %v", st.name, res.Err, st.err)
			}
			// Only the index moved.
			after := a.snapshot()
			if got := len(a.fsm.State().ACLTokens()); len(after) != len(before) || got == 0 {
				t.Fatalf("%s: a refused command changed the state", st.name)
			}
			continue
		}
		if res.Err != nil || res.Result != st.res {
			t.Fatalf("%s: %v %v, want %v", st.name, res.Result, res.Err, st.res)
		}
	}
	s := a.fsm.State()
	if s.ACLBootstrapped() != 1 {
		t.Fatalf("bootstrapped at %d, want 1", s.ACLBootstrapped())
	}
	if tok, ok := s.ACLTokenBySecretHash(api.HashSecret("s0")); !ok || tok.AccessorID != "root" || tok.CreateIndex != 1 {
		t.Fatalf("root token: %+v %v", tok, ok)
	}
	if _, ok := s.ACLTokenBySecretHash(api.HashSecret("s2")); ok {
		t.Fatal("a deleted token still resolves")
	}
}

// Tokens survive a snapshot byte for byte, and a registry without them
// writes no ACL field at all.
func TestACLSnapshot(t *testing.T) {
	a := newApplier(t)
	a.apply(reg(plugin("csi", "ebs", "a1")))
	plain := a.snapshot()
	if bytes.Contains(plain, []byte("ACL")) {
		t.Fatal("a snapshot without ACLs mentions them")
	}
	a.apply(&ACLBootstrapRequest{Token: token("root", "s0", operator)})
	a.apply(&ACLTokenSetRequest{Token: token("w", "s1", api.ACLPolicy{Kind: api.ACLWrite, Types: []string{"csi"}})})
	a.apply(&ACLTokenSetRequest{Token: token("b", "s2", api.ACLPolicy{Kind: api.ACLRead})})
	first := a.snapshot()
	b := New(nil)
	if err := b.Restore(io.NopCloser(bytes.NewReader(first))); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := WriteState(&again, b.State()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again.Bytes()) {
		t.Fatal("snapshot -> restore -> snapshot with tokens is not byte-identical")
	}
	if got := b.State().ACLTokens(); len(got) != 3 || got[0].AccessorID != "b" || b.State().ACLBootstrapped() != 2 {
		t.Fatalf("restored tokens %v, bootstrapped %d", got, b.State().ACLBootstrapped())
	}
	// A header that promises a token the stream does not hold is refused.
	truncated := first[:len(first)-10]
	if err := New(nil).Restore(io.NopCloser(bytes.NewReader(truncated))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("truncated snapshot: %v", err)
	}
}
