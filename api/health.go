package api

import (
	"fmt"
	"time"
)

// HealthStatus is an instance's health: passing or suspect. An instance
// that is gone is not in the registry at all (deregistered, reaped or
// expired), so there is no third status to hold.
type HealthStatus string

const (
	// HealthPassing: nothing says the instance is unwell. A passing
	// instance carries no Health (PluginInfo.Health is nil), so that it
	// encodes, in the log, in snapshots and on the wire, to the bytes it
	// did before health existed.
	HealthPassing HealthStatus = "passing"
	// HealthSuspect: the instance is still registered, but its agent's
	// probes time out (CheckProbe) or its host is failed in gossip and
	// not yet reaped (CheckNode). Consumers choose whether to use it; the
	// recency order does not change with health.
	HealthSuspect HealthStatus = "suspect"
)

// Who marked an instance suspect (Health.Check).
const (
	// CheckProbe: the host's agent, whose probes of the plugin's socket
	// time out (pluginwatcher's slow probes). The agent clears it when the
	// plugin answers again.
	CheckProbe = "probe"
	// CheckNode: the leader, because the instance's node is failed in
	// gossip. The leader clears it when the node is alive again, and the
	// node's agent clears it when it next re-asserts its registrations
	// (an agent that can write is not dead).
	CheckNode = "node"
)

// MaxHealthReasonBytes bounds Health.Reason.
const MaxHealthReasonBytes = 1024

// InstanceHealth says why an instance is suspect (PluginInfo.Health;
// api.Health is an agent's own health). It is set on suspect instances
// only (see HealthPassing).
type InstanceHealth struct {
	Status HealthStatus
	// Check names who decided: CheckProbe, CheckNode, or a name of the
	// API registrant's choosing (an external health checker).
	Check string
	// Reason is what the checker saw, for people.
	Reason string `json:",omitempty"`
	// LastSeen is the last moment the instance was known passing: when
	// its checker marked it suspect (the proposer's clock, carried in the
	// log entry, so every server holds the same time).
	LastSeen time.Time
}

// Copy returns a copy of h (nil for nil).
func (h *InstanceHealth) Copy() *InstanceHealth {
	if h == nil {
		return nil
	}
	c := *h
	return &c
}

// Suspect reports whether p is marked suspect: such an instance covers
// no node (Coverage) and meets no agent's required types.
func (p *PluginInfo) Suspect() bool { return p.Health != nil && p.Health.Status == HealthSuspect }

// SameHealth reports whether a and b say the same thing (nil: passing).
func SameHealth(a, b *InstanceHealth) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Status == b.Status && a.Check == b.Check && a.Reason == b.Reason && a.LastSeen.Equal(b.LastSeen)
}

// ValidateHealth checks h as part of a registration: nil (passing), or a
// suspect status with a Check and a bounded Reason. A passing instance
// omits Health rather than carrying a passing one, so that an instance has
// one encoding per meaning.
func ValidateHealth(h *InstanceHealth) error {
	if h == nil {
		return nil
	}
	if h.Status != HealthSuspect {
		return fmt.Errorf("%w: Health.Status %q: a registration carries Health only when %q (omit it for %q)", ErrInvalid, h.Status, HealthSuspect, HealthPassing)
	}
	if err := ValidateIdentifier("Health.Check", h.Check); err != nil {
		return err
	}
	return validateText("Health.Reason", h.Reason, MaxHealthReasonBytes)
}
