package fsm

import (
	"github.com/plugreg/plugreg/api"
)

// The plugin wire types and their validation live in api, which clients
// and plugins import without the server (no raft); the FSM stores them as
// they are.
type (
	PluginInfo     = api.PluginInfo
	ConnectionInfo = api.ConnectionInfo
)

// Limits on one PluginInfo (see api).
const (
	MaxFieldBytes   = api.MaxFieldBytes
	MaxOptions      = api.MaxOptions
	MaxPluginBytes  = api.MaxPluginBytes
	MaxRequestIDLen = api.MaxRequestIDLen
)

// ValidatePlugin checks a PluginInfo as a registration request (api.ValidatePlugin).
func ValidatePlugin(p *PluginInfo) error { return api.ValidatePlugin(p) }

// ValidateIdentifier checks one part of a plugin's identity (api.ValidateIdentifier).
func ValidateIdentifier(field, v string) error { return api.ValidateIdentifier(field, v) }

// sameContent reports whether a and b describe the same instance with the
// same content, ignoring the indexes the FSM assigns. An empty Options map
// equals a nil one: both encode to nothing meaningful.
func sameContent(a, b *PluginInfo) bool { return api.SameContent(a, b) }
