package api

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
)

// Scoped request IDs. The FSM's window answers a remembered request ID
// with its first result and applies nothing; a raw ID was global across
// callers and commands, so one caller's ID answered another's write,
// which never applied. The server that builds a command records the ID
// as ScopeRequestID(caller, kind, id) instead: the same caller's retry of
// the same kind of write matches it on every server, nothing else does.
// The log and the FSM treat a scoped ID as any other (entries of older
// releases apply the same), within MaxRequestIDLen.
//
// A scoped ID is "s1." + a digest of the caller and kind + "." + the raw
// ID, readable in the apply log (UnscopedRequestID gets it back), or,
// when that would be too long, "s1#" + the digest + "." + a digest of the
// raw ID.
const (
	scopedReadable = "s1."
	scopedHashed   = "s1#"
	// scopeDigestLen: 22 base64 characters, 132 bits of SHA-256.
	scopeDigestLen  = 22
	scopedPrefixLen = len(scopedReadable) + scopeDigestLen + 1
)

// ScopeRequestID is id as recorded for a write of kind ("register",
// "deregister", ...) by the caller scope (authz.Identity.Scope; "" for a
// caller without a token); "" stays "" (no request ID).
func ScopeRequestID(scope, kind, id string) string {
	if id == "" {
		return ""
	}
	h := sha256.New()
	for _, part := range []string{scope, kind} {
		// Length-prefixed: no two pairs hash the same bytes.
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		h.Write([]byte(part))
	}
	digest := base64.RawURLEncoding.EncodeToString(h.Sum(nil))[:scopeDigestLen]
	if scopedPrefixLen+len(id) <= MaxRequestIDLen {
		return scopedReadable + digest + "." + id
	}
	sum := sha256.Sum256([]byte(id))
	return scopedHashed + digest + "." + base64.RawURLEncoding.EncodeToString(sum[:])
}

// UnscopedRequestID is the caller's raw ID in a recorded one (as
// ScopeRequestID made it readable); other IDs (older releases', hashed
// ones) as they are.
func UnscopedRequestID(recorded string) string {
	if len(recorded) > scopedPrefixLen && strings.HasPrefix(recorded, scopedReadable) && recorded[scopedPrefixLen-1] == '.' {
		return recorded[scopedPrefixLen:]
	}
	return recorded
}
