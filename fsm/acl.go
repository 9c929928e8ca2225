package fsm

import (
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"github.com/plugreg/plugreg/api"
)

// ACL commands. New types without IgnoreUnknownTypeFlag: a binary that
// skipped them would keep answering with tokens the others deleted, so
// binaries older than them refuse to apply them (every server must run a
// release that knows them before ACLs are bootstrapped).
const (
	ACLBootstrapCommand   CommandType = 5
	ACLTokenSetCommand    CommandType = 6
	ACLTokenDeleteCommand CommandType = 7
)

// Results of ACL commands.
const (
	ResultCreated api.Result = "created"
	ResultDeleted api.Result = "deleted"
)

// ACLToken is a token as the state holds it: its secret only as a SHA-256.
type ACLToken struct {
	AccessorID  string
	SecretHash  string // hex SHA-256 of the SecretID (api.HashSecret)
	Description string `codec:",omitempty"`
	Policies    []api.ACLPolicy
	CreateIndex uint64
	// Node binds the token to one node (an agent token): see api.ACLToken.
	Node string `codec:",omitempty"`
}

// API is the token as clients see it (no hash).
func (t *ACLToken) API() api.ACLToken {
	return api.ACLToken{AccessorID: t.AccessorID, Description: t.Description, Policies: t.Policies, CreateIndex: t.CreateIndex, Node: t.Node}
}

func (t *ACLToken) validate() error {
	if err := api.ValidateIdentifier("AccessorID", t.AccessorID); err != nil {
		return err
	}
	if b, err := hex.DecodeString(t.SecretHash); err != nil || len(b) != 32 {
		return fmt.Errorf("%w: SecretHash is not a hex SHA-256", api.ErrInvalid)
	}
	// What an operator may ask for is what the log may hold.
	req := api.ACLTokenCreateRequest{Description: t.Description, Policies: t.Policies, Node: t.Node}
	return req.Validate()
}

// ACLBootstrapRequest creates the first token (an operator token) once; a
// second bootstrap is refused with api.ErrACLBootstrapped.
type ACLBootstrapRequest struct {
	Token     ACLToken
	RequestID string `json:",omitempty"`
}

// ACLTokenSetRequest creates a token; an AccessorID or secret already in
// use is refused (ErrConflict): tokens are never changed in place, only
// created and deleted.
type ACLTokenSetRequest struct {
	Token     ACLToken
	RequestID string `json:",omitempty"`
}

// ACLTokenDeleteRequest deletes a token by its AccessorID.
type ACLTokenDeleteRequest struct {
	AccessorID string
	RequestID  string `json:",omitempty"`
}

func (*ACLBootstrapRequest) CommandType() CommandType   { return ACLBootstrapCommand }
func (*ACLTokenSetRequest) CommandType() CommandType    { return ACLTokenSetCommand }
func (*ACLTokenDeleteRequest) CommandType() CommandType { return ACLTokenDeleteCommand }
func (r *ACLBootstrapRequest) ID() string               { return r.RequestID }
func (r *ACLTokenSetRequest) ID() string                { return r.RequestID }
func (r *ACLTokenDeleteRequest) ID() string             { return r.RequestID }

func (r *ACLBootstrapRequest) Validate() error {
	if err := r.Token.validate(); err != nil {
		return err
	}
	if !slices.ContainsFunc(r.Token.Policies, func(p api.ACLPolicy) bool { return p.Kind == api.ACLOperator }) {
		return fmt.Errorf("%w: the bootstrap token is an operator token", api.ErrInvalid)
	}
	return validateRequestID(r.RequestID)
}

func (r *ACLTokenSetRequest) Validate() error {
	if err := r.Token.validate(); err != nil {
		return err
	}
	return validateRequestID(r.RequestID)
}

func (r *ACLTokenDeleteRequest) Validate() error {
	if err := api.ValidateIdentifier("AccessorID", r.AccessorID); err != nil {
		return err
	}
	return validateRequestID(r.RequestID)
}

// aclState is the tokens, copied on every change (a cluster has tens of
// tokens, changed rarely): a State shares it until a command changes it.
type aclState struct {
	bootstrapIndex uint64               // 0: not bootstrapped
	tokens         map[string]*ACLToken // by AccessorID
	bySecret       map[string]*ACLToken // by SecretHash
}

func (a *aclState) clone() *aclState {
	if a == nil {
		return &aclState{tokens: map[string]*ACLToken{}, bySecret: map[string]*ACLToken{}}
	}
	return &aclState{bootstrapIndex: a.bootstrapIndex, tokens: maps.Clone(a.tokens), bySecret: maps.Clone(a.bySecret)}
}

func (a *aclState) put(t *ACLToken) {
	a.tokens[t.AccessorID] = t
	a.bySecret[t.SecretHash] = t
}

// ACLBootstrapped reports the index at which ACLs were bootstrapped (0: not yet).
func (s *State) ACLBootstrapped() uint64 {
	if s.acl == nil {
		return 0
	}
	return s.acl.bootstrapIndex
}

// SameACL reports whether s and o hold the same tokens: every ACL command
// applied and every restore gives a state a new token set, so a reader of
// successive states learns of an ACL change without comparing tokens.
func (s *State) SameACL(o *State) bool { return s.acl == o.acl }

// ACLTokenBySecretHash returns the token whose secret hashes to h.
func (s *State) ACLTokenBySecretHash(h string) (*ACLToken, bool) {
	if s.acl == nil {
		return nil, false
	}
	t, ok := s.acl.bySecret[h]
	return t, ok
}

// ACLToken returns the token with AccessorID accessor.
func (s *State) ACLToken(accessor string) (*ACLToken, bool) {
	if s.acl == nil {
		return nil, false
	}
	t, ok := s.acl.tokens[accessor]
	return t, ok
}

// ACLTokens returns every token, by AccessorID.
func (s *State) ACLTokens() []*ACLToken {
	if s.acl == nil {
		return nil
	}
	out := make([]*ACLToken, 0, len(s.acl.tokens))
	for _, k := range slices.Sorted(maps.Keys(s.acl.tokens)) {
		out = append(out, s.acl.tokens[k])
	}
	return out
}

// applyACL applies an ACL command. Refusals are deterministic: every
// server sees the same state.
func (s *State) applyACL(index uint64, req Request) (api.Result, error) {
	switch r := req.(type) {
	case *ACLBootstrapRequest:
		if s.ACLBootstrapped() != 0 {
			return "", fmt.Errorf("%w (at index %d)", api.ErrACLBootstrapped, s.acl.bootstrapIndex)
		}
		return s.createToken(index, r.Token, true)
	case *ACLTokenSetRequest:
		return s.createToken(index, r.Token, false)
	case *ACLTokenDeleteRequest:
		if s.acl == nil || s.acl.tokens[r.AccessorID] == nil {
			return api.ResultAbsent, nil
		}
		next := s.acl.clone()
		t := next.tokens[r.AccessorID]
		delete(next.tokens, t.AccessorID)
		delete(next.bySecret, t.SecretHash)
		s.acl = next
		return ResultDeleted, nil
	}
	return "", fmt.Errorf("%w: %T is not an ACL command", api.ErrInvalid, req)
}

func (s *State) createToken(index uint64, t ACLToken, bootstrap bool) (api.Result, error) {
	if s.acl != nil {
		if _, ok := s.acl.tokens[t.AccessorID]; ok {
			return "", fmt.Errorf("%w: accessor %s exists", api.ErrConflict, t.AccessorID)
		}
		if _, ok := s.acl.bySecret[t.SecretHash]; ok {
			return "", fmt.Errorf("%w: that secret is in use", api.ErrConflict)
		}
	}
	next := s.acl.clone()
	t.CreateIndex = index
	next.put(&t)
	if bootstrap {
		next.bootstrapIndex = index
	}
	s.acl = next
	return ResultCreated, nil
}

// aclRecords are the tokens in snapshot order (by AccessorID).
func (s *State) aclRecords() []*ACLToken { return s.ACLTokens() }

// readACL restores tokens from snapshot records.
func readACL(bootstrapIndex uint64, tokens []*ACLToken, index uint64) (*aclState, error) {
	if bootstrapIndex == 0 && len(tokens) == 0 {
		return nil, nil
	}
	if bootstrapIndex > index {
		return nil, fmt.Errorf("ACL bootstrap index %d past state index %d", bootstrapIndex, index)
	}
	a := (*aclState)(nil).clone()
	a.bootstrapIndex = bootstrapIndex
	prev := ""
	for i, t := range tokens {
		if err := t.validate(); err != nil {
			return nil, fmt.Errorf("token %d: %w", i, err)
		}
		if i > 0 && t.AccessorID <= prev {
			return nil, fmt.Errorf("token %d out of order", i)
		}
		if t.CreateIndex == 0 || t.CreateIndex > index {
			return nil, fmt.Errorf("token %d created at %d, state index %d", i, t.CreateIndex, index)
		}
		if _, dup := a.bySecret[t.SecretHash]; dup {
			return nil, fmt.Errorf("token %d: secret twice", i)
		}
		a.put(t)
		prev = t.AccessorID
	}
	return a, nil
}
