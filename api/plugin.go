package api

import (
	"fmt"
	"maps"
	"strings"
	"unicode/utf8"
)

// Limits on one PluginInfo. They bound the size of a log entry and of the
// state, and are checked before anything is proposed.
const (
	MaxFieldBytes   = 256       // Type, Name, AllocID, Version, NodeID
	MaxOptions      = 64        // entries in Options
	MaxPluginBytes  = 64 * 1024 // all strings of one PluginInfo together
	MaxRequestIDLen = 128       // a write's request ID
)

// ConnectionInfo says how to reach a plugin instance. At least one of the
// fields is set.
type ConnectionInfo struct {
	SocketPath string `json:",omitempty"`
	Address    string `json:",omitempty"`
}

// PluginInfo is one registered plugin instance. Its identity is
// (Type, Name, AllocID). CreateIndex and ModifyIndex are the Raft indexes of
// the entries that created and last changed it; they are set by the FSM and
// ignored on input.
type PluginInfo struct {
	Type           string
	Name           string
	AllocID        string
	Version        string            `json:",omitempty"`
	NodeID         string            `json:",omitempty"`
	ConnectionInfo *ConnectionInfo   `json:",omitempty"`
	Options        map[string]string `json:",omitempty"`
	// TTL, when set, leases the registration (lease.go): it expires
	// unless renewed at least once a TTL. Left out of every encoding when
	// zero, so an instance without a lease encodes (in the log, in
	// snapshots, in JSON) to the bytes it did before leases existed, and
	// an entry or snapshot written before them decodes with none.
	TTL Duration `json:",omitempty"`
	// Health is set while the instance is suspect (health.go); nil is
	// passing. Left out of every encoding when nil, as TTL is when zero.
	Health      *InstanceHealth `json:",omitempty"`
	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a deep copy, so that the caller and the registry never share
// a PluginInfo (Nomad's seed registry kept the caller's pointer).
func (p *PluginInfo) Copy() *PluginInfo {
	if p == nil {
		return nil
	}
	c := *p
	if p.ConnectionInfo != nil {
		ci := *p.ConnectionInfo
		c.ConnectionInfo = &ci
	}
	if p.Options != nil {
		c.Options = maps.Clone(p.Options)
	}
	c.Health = p.Health.Copy()
	return &c
}

// ValidatePlugin checks a PluginInfo as a registration request. The error
// wraps ErrInvalid or ErrTooLarge and names the field at fault.
func ValidatePlugin(p *PluginInfo) error {
	if p == nil {
		return fmt.Errorf("%w: plugin is missing", ErrInvalid)
	}
	if err := ValidateInstanceID(p.Type, p.Name, p.AllocID); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{
		{"Version", p.Version}, {"NodeID", p.NodeID},
	} {
		if err := validateText(f.name, f.v, MaxFieldBytes); err != nil {
			return err
		}
	}
	ci := p.ConnectionInfo
	if ci == nil || (ci.SocketPath == "" && ci.Address == "") {
		return fmt.Errorf("%w: ConnectionInfo needs a SocketPath or an Address", ErrInvalid)
	}
	if err := ValidateTTL(p.TTL); err != nil {
		return err
	}
	if err := ValidateHealth(p.Health); err != nil {
		return err
	}
	if len(p.Options) > MaxOptions {
		return fmt.Errorf("%w: %d options, at most %d", ErrTooLarge, len(p.Options), MaxOptions)
	}
	total := len(p.Type) + len(p.Name) + len(p.AllocID) + len(p.Version) + len(p.NodeID) +
		len(ci.SocketPath) + len(ci.Address)
	for k, v := range p.Options {
		if k == "" {
			return fmt.Errorf("%w: empty option key", ErrInvalid)
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: option %q is not valid UTF-8", ErrInvalid, k)
		}
		total += len(k) + len(v)
	}
	for _, f := range []struct{ name, v string }{
		{"ConnectionInfo.SocketPath", ci.SocketPath}, {"ConnectionInfo.Address", ci.Address},
	} {
		if err := validateText(f.name, f.v, MaxPluginBytes); err != nil {
			return err
		}
	}
	if total > MaxPluginBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, total, MaxPluginBytes)
	}
	return nil
}

// ValidateInstanceID checks an instance's identity (Type, Name, AllocID),
// each with ValidateIdentifier, naming the fields as PluginInfo does.
func ValidateInstanceID(ptype, name, allocID string) error {
	for _, f := range []struct{ name, v string }{
		{"Type", ptype}, {"Name", name}, {"AllocID", allocID},
	} {
		if err := ValidateIdentifier(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// ValidateNewIdentifier checks an identifier a write is to create (a
// registration's type, name, alloc and node, a node's or a token's node
// ID): as ValidateIdentifier, and neither "." nor "..", which clients and
// proxies resolve away as a URL's dot segments (RFC 3986), so that the
// HTTP API could reach what they name only URL-encoded.
//
// It is for the edges and for proposing a command, not for decoding one:
// what an older release let in (an instance named ".", an entry in its
// log) still decodes, applies, reads and deregisters, through
// ValidateIdentifier, so an upgrade strands no instance.
func ValidateNewIdentifier(field, v string) error {
	if err := ValidateIdentifier(field, v); err != nil {
		return err
	}
	return refuseDotSegment(field, v)
}

func refuseDotSegment(field, v string) error {
	if v == "." || v == ".." {
		return fmt.Errorf("%w: %s %q: '.' and '..' are not names (URLs resolve them away as path segments)", ErrInvalid, field, v)
	}
	return nil
}

// ValidateNewPlugin checks a registration to propose: as ValidatePlugin,
// and its identity (and node, if any) as ValidateNewIdentifier.
func ValidateNewPlugin(p *PluginInfo) error {
	if err := ValidatePlugin(p); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{
		{"Type", p.Type}, {"Name", p.Name}, {"AllocID", p.AllocID}, {"NodeID", p.NodeID},
	} {
		if err := refuseDotSegment(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// ValidateIdentifier checks one part of a plugin's identity (a type, name,
// alloc or node ID): non-empty, at most MaxFieldBytes, valid UTF-8, no '/'
// (it would be unaddressable in the HTTP API's paths) and no control
// characters.
func ValidateIdentifier(field, v string) error {
	if v == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	}
	if err := validateText(field, v, MaxFieldBytes); err != nil {
		return err
	}
	if strings.ContainsRune(v, '/') {
		return fmt.Errorf("%w: %s %q contains '/'", ErrInvalid, field, v)
	}
	return nil
}

// ValidateRequestID checks a write's request ID: empty (none), or at most
// MaxRequestIDLen bytes of printable UTF-8.
func ValidateRequestID(id string) error {
	if id == "" {
		return nil
	}
	return validateText("RequestID", id, MaxRequestIDLen)
}

func validateText(field, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%w: %s is %d bytes, at most %d", ErrTooLarge, field, len(v), max)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s contains a control character", ErrInvalid, field)
		}
	}
	return nil
}

// Options keys plugreg itself sets on the instances a host agent registers.
const (
	// OptionSource names what registered an instance on its host's
	// behalf; the host's agent owns (and keeps right) the instances of its
	// node with a source it runs.
	OptionSource = "plugreg.source"
	// SourceKubelet: discovered in the plugins dir (kubelet protocol).
	SourceKubelet = "kubelet"
	// SourceStub: a plugin connected to the agent's plugin socket.
	SourceStub = "stub"
)

// SameContent reports whether a and b register the same thing: every
// field but the indexes (a new TTL is a change, and so is new health).
func SameContent(a, b *PluginInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Type != b.Type || a.Name != b.Name || a.AllocID != b.AllocID || a.Version != b.Version || a.NodeID != b.NodeID || a.TTL != b.TTL {
		return false
	}
	ca, cb := a.ConnectionInfo, b.ConnectionInfo
	if (ca == nil) != (cb == nil) || (ca != nil && *ca != *cb) {
		return false
	}
	return maps.Equal(a.Options, b.Options) && SameHealth(a.Health, b.Health)
}

// SameButHealth reports whether a and b register the same thing apart
// from their health: a change between them is a health change.
func SameButHealth(a, b *PluginInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	ha, hb := a.Health, b.Health
	x, y := *a, *b
	x.Health, y.Health = nil, nil
	return !SameHealth(ha, hb) && SameContent(&x, &y)
}
