package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// ACLs: tokens with policies, replicated in the FSM (only a SHA-256 of each
// secret is stored or logged), checked by every HTTP route. The model is
// Consul's and Nomad's, cut to what a plugin registry needs: a token is an
// AccessorID (public: names it in lists and deletes) and a SecretID (the
// credential, sent as X-Plugreg-Token), and carries policies.

// ACLPolicyKind is what a policy grants.
type ACLPolicyKind string

const (
	// ACLRead reads plugins and events of the policy's types.
	ACLRead ACLPolicyKind = "read"
	// ACLWrite reads, registers and deregisters plugins of its types.
	ACLWrite ACLPolicyKind = "write"
	// ACLOperator is everything: all types, the cluster's operator calls
	// (leave, leadership transfer, peers, keyring) and ACL management.
	ACLOperator ACLPolicyKind = "operator"
)

// ACLPolicy grants Kind on Types: exact type names, or prefixes written
// "csi-*". No Types means every type. Operator ignores Types.
type ACLPolicy struct {
	Kind  ACLPolicyKind
	Types []string `json:",omitempty"`
}

// ACLToken is a token as the cluster stores and lists it: never its secret.
type ACLToken struct {
	AccessorID  string
	Description string `json:",omitempty"`
	Policies    []ACLPolicy
	CreateIndex uint64
	// Node, when set, binds the token to that node (an agent token, like
	// Consul's node identities): whatever its policies grant, it registers
	// only instances whose NodeID is Node, deregisters only instances of
	// Node (the deregistration is made conditional on it, checked where
	// the entry is applied) and deregisters no other node's plugins.
	Node string `json:",omitempty"`
}

// ACLTokenSecret is a token with its secret: what bootstrap and create
// answer, once. The cluster keeps only its hash.
type ACLTokenSecret struct {
	ACLToken
	SecretID string
}

// ACLTokenCreateRequest is the body of PUT /v1/acl/token.
type ACLTokenCreateRequest struct {
	Description string `json:",omitempty"`
	Policies    []ACLPolicy
	// Node binds the token to a node (see ACLToken.Node).
	Node string `json:",omitempty"`
}

// Validate checks a create request as given by an operator.
func (r *ACLTokenCreateRequest) Validate() error {
	if err := ValidatePolicies(r.Policies); err != nil {
		return err
	}
	if err := ValidateDescription(r.Description); err != nil {
		return err
	}
	if r.Node != "" {
		if err := ValidateIdentifier("Node", r.Node); err != nil {
			return err
		}
		for _, p := range r.Policies {
			if p.Kind == ACLOperator {
				return fmt.Errorf("%w: a node-bound token cannot hold an operator policy (operator calls are not a node's)", ErrInvalid)
			}
		}
	}
	return nil
}

// Limits on ACL input.
const (
	MaxACLPolicies    = 16
	MaxACLPolicyTypes = 64
	MaxACLDescription = 256
)

// ErrPermissionDenied: the request's token (or its absence, under the
// default policy) does not allow it. HTTP 403, code "permission_denied".
var ErrPermissionDenied = errors.New("plugreg: permission denied")

// ErrACLNotFound: the token sent is not known (it never existed, or was
// deleted). HTTP 403, code "acl_not_found". The message never carries the
// token. It is a permission denial too (errors.Is(err, ErrPermissionDenied)
// holds): a caller that only asks "may I?" needs no second case.
var ErrACLNotFound = fmt.Errorf("%w: ACL token not found", ErrPermissionDenied)

// ErrACLBootstrapped: the ACL system was bootstrapped already.
var ErrACLBootstrapped = errors.New("plugreg: ACL system already bootstrapped")

// Codes of ACL refusals.
const (
	CodePermissionDenied = "permission_denied"
	CodeACLNotFound      = "acl_not_found"
	CodeACLBootstrapped  = "acl_bootstrapped"
)

// Validate checks a policy list as given by an operator.
func ValidatePolicies(ps []ACLPolicy) error {
	if len(ps) == 0 {
		return fmt.Errorf("%w: a token needs at least one policy", ErrInvalid)
	}
	if len(ps) > MaxACLPolicies {
		return fmt.Errorf("%w: %d policies, at most %d", ErrTooLarge, len(ps), MaxACLPolicies)
	}
	for _, p := range ps {
		switch p.Kind {
		case ACLRead, ACLWrite:
		case ACLOperator:
			if len(p.Types) > 0 {
				return fmt.Errorf("%w: an operator policy covers every type; it takes no Types", ErrInvalid)
			}
		default:
			return fmt.Errorf("%w: policy kind %q: want read, write or operator", ErrInvalid, p.Kind)
		}
		if len(p.Types) > MaxACLPolicyTypes {
			return fmt.Errorf("%w: %d types in a policy, at most %d", ErrTooLarge, len(p.Types), MaxACLPolicyTypes)
		}
		for _, t := range p.Types {
			name := strings.TrimSuffix(t, "*")
			if strings.Contains(name, "*") {
				return fmt.Errorf("%w: type pattern %q: '*' only at the end", ErrInvalid, t)
			}
			if name == "" && t != "*" {
				return fmt.Errorf("%w: empty type pattern", ErrInvalid)
			}
			if name != "" {
				if err := ValidateIdentifier("policy type", name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ValidateDescription checks a token's description.
func ValidateDescription(d string) error {
	return validateText("Description", d, MaxACLDescription)
}

// matches reports whether typ is one of the policy's types.
func (p ACLPolicy) matches(typ string) bool {
	if len(p.Types) == 0 {
		return true
	}
	for _, t := range p.Types {
		if prefix, ok := strings.CutSuffix(t, "*"); ok {
			if strings.HasPrefix(typ, prefix) {
				return true
			}
		} else if t == typ {
			return true
		}
	}
	return false
}

// Authorizer answers what a request may do. The zero value denies all.
type Authorizer struct {
	policies []ACLPolicy
	all      bool // ACLs off, or default allow for anonymous: everything
}

// AllowAll is the Authorizer of a request when ACLs are off, or an
// anonymous one under default allow.
func AllowAll() Authorizer { return Authorizer{all: true} }

// DenyAll is the Authorizer of an anonymous request under default deny.
func DenyAll() Authorizer { return Authorizer{} }

// TokenAuthorizer grants what the token's policies grant.
func TokenAuthorizer(t *ACLToken) Authorizer { return Authorizer{policies: t.Policies} }

func (a Authorizer) grants(kinds []ACLPolicyKind, typ string, anyType bool) bool {
	if a.all {
		return true
	}
	for _, p := range a.policies {
		if p.Kind == ACLOperator {
			return true
		}
		for _, k := range kinds {
			if p.Kind == k && (anyType && len(p.Types) == 0 || !anyType && p.matches(typ)) {
				return true
			}
		}
	}
	return false
}

// CanRead reports whether plugins and events of typ may be read.
func (a Authorizer) CanRead(typ string) bool {
	return a.grants([]ACLPolicyKind{ACLRead, ACLWrite}, typ, false)
}

// CanWrite reports whether plugins of typ may be registered and deregistered.
func (a Authorizer) CanWrite(typ string) bool {
	return a.grants([]ACLPolicyKind{ACLWrite}, typ, false)
}

// CanReadAll reports whether every type may be read (listing types,
// cluster status).
func (a Authorizer) CanReadAll() bool {
	return a.grants([]ACLPolicyKind{ACLRead, ACLWrite}, "", true)
}

// CanWriteAll reports whether every type may be written (deregistering a
// whole node's plugins, whatever their types).
func (a Authorizer) CanWriteAll() bool {
	return a.grants([]ACLPolicyKind{ACLWrite}, "", true)
}

// CanWriteAny reports whether plugins of some type may be written: what
// a write needs before its body says which type.
func (a Authorizer) CanWriteAny() bool {
	if a.all {
		return true
	}
	for _, p := range a.policies {
		if p.Kind == ACLWrite || p.Kind == ACLOperator {
			return true
		}
	}
	return false
}

// CanReadAny reports whether the request holds any policy (or is allowed
// everything): enough to see the cluster's members and status.
func (a Authorizer) CanReadAny() bool { return a.all || len(a.policies) > 0 }

// IsOperator reports whether operator calls and ACL management are allowed.
func (a Authorizer) IsOperator() bool { return a.all || a.hasOperator() }

func (a Authorizer) hasOperator() bool {
	for _, p := range a.policies {
		if p.Kind == ACLOperator {
			return true
		}
	}
	return false
}

// NewACLSecret makes a token's secret and accessor: random UUIDs (v4).
func NewACLSecret() (accessor, secret string, err error) {
	if accessor, err = randomUUID(); err != nil {
		return "", "", err
	}
	if secret, err = randomUUID(); err != nil {
		return "", "", err
	}
	return accessor, secret, nil
}

// HashSecret is what the cluster stores and compares for a secret.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// randomUUID is a version 4 UUID from crypto/rand (uuid.NewRandom's
// source unless its pool is enabled, which plugreg never does: a pooled
// secret would sit in memory before it is handed out).
func randomUUID() (string, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return u.String(), nil
}

type tokenKey struct{}

// WithToken returns a context whose writes through a client agent carry
// secret to the server (which checks it as the HTTP API would).
func WithToken(ctx context.Context, secret string) context.Context {
	return context.WithValue(ctx, tokenKey{}, secret)
}

// Token returns the secret set by WithToken, or "".
func Token(ctx context.Context) string {
	s, _ := ctx.Value(tokenKey{}).(string)
	return s
}
