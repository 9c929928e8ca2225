package stub

import (
	"context"
	"time"

	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
)

// EventMask selects the kinds of registry events a plugin receives.
type EventMask uint32

// Event kinds, as bits of an EventMask.
const (
	Registered   = EventMask(pb.EventKind_EVENT_KIND_REGISTERED)
	Updated      = EventMask(pb.EventKind_EVENT_KIND_UPDATED)
	Deregistered = EventMask(pb.EventKind_EVENT_KIND_DEREGISTERED)
	Reset        = EventMask(pb.EventKind_EVENT_KIND_RESET)
	// Expired: an instance removed because its lease ran out. A mask
	// without it but with Deregistered gets expiries as
	// deregistrations (pb.MaskedKind).
	Expired = EventMask(pb.EventKind_EVENT_KIND_EXPIRED)
	// Health: an instance's health changed (passing or suspect), and
	// nothing else. A mask without it but with Updated gets health
	// changes as updates (pb.MaskedKind).
	Health    = EventMask(pb.EventKind_EVENT_KIND_HEALTH)
	AllEvents = Registered | Updated | Deregistered | Reset | Expired | Health
)

// Config is what the agent tells a plugin when it registers.
type Config struct {
	// NodeID is the agent's node: the plugin is registered there.
	NodeID string
	// Config is the operator's configuration for this plugin (a file in
	// the agent's -plugin-config-dir), empty if none.
	Config string
	// AllocID is the plugin's instance ID in the registry.
	AllocID string
	// RegistrationTimeout and RequestTimeout are the agent's (see Stub).
	RegistrationTimeout, RequestTimeout time.Duration
	// Reclaimed is true when this session took over the plugin's
	// registration from an earlier one (a reconnect within the grace
	// period): nothing was re-registered.
	Reclaimed bool
}

// ConfigureInterface is called on every (re)connect, before the plugin is
// registered. It runs on the stub's connection goroutine: on a reconnect
// it may overlap an event handler still busy with an earlier event. The
// event and Shutdown handlers run one at a time, in order, on the stub's
// handler goroutine. It may return the event mask to use (zero: the one from
// WithEventMask or the implemented interfaces). An error ends the stub:
// the plugin is not registered.
type ConfigureInterface interface {
	Configure(ctx context.Context, cfg Config) (EventMask, error)
}

// RegisteredInterface receives registered events: ev.Info is the new
// instance, ev.Current the newest of its name.
type RegisteredInterface interface {
	Registered(ctx context.Context, ev *api.Event) error
}

// UpdatedInterface receives updated events.
type UpdatedInterface interface {
	Updated(ctx context.Context, ev *api.Event) error
}

// DeregisteredInterface receives deregistered events: ev.Info is the
// removed instance, ev.Current the newest left of its name (nil if none).
type DeregisteredInterface interface {
	Deregistered(ctx context.Context, ev *api.Event) error
}

// ExpiredInterface receives expired events: ev.Info is the instance its
// lease's end removed, ev.Current the newest left of its name (nil if
// none). A plugin that does not implement it but implements
// DeregisteredInterface gets expiries there, with ev.EventType "expired"
// when its mask asks for Expired, "deregistered" otherwise.
type ExpiredInterface interface {
	Expired(ctx context.Context, ev *api.Event) error
}

// HealthInterface receives health events: ev.Info is the instance with
// its new health (Health nil: passing again), ev.Current the newest of its
// name. A plugin that does not implement it but implements
// UpdatedInterface gets health changes there, with ev.EventType "health"
// when its mask asks for Health, "updated" otherwise.
type HealthInterface interface {
	Health(ctx context.Context, ev *api.Event) error
}

// ResetInterface receives resets: ev.Plugins replaces everything the
// plugin knew of its types, as of ev.Index. A plugin gets one when it has
// fallen so far behind that the node no longer holds the events it
// missed.
type ResetInterface interface {
	Reset(ctx context.Context, ev *api.Event) error
}

// ShutdownInterface is called when the agent says it is stopping. The
// stub then reconnects when the agent is back (unless it was told not to).
type ShutdownInterface interface {
	Shutdown(ctx context.Context)
}

// derivedMask is the mask of the event interfaces p implements.
func derivedMask(p any) EventMask {
	var m EventMask
	if _, ok := p.(RegisteredInterface); ok {
		m |= Registered
	}
	if _, ok := p.(UpdatedInterface); ok {
		m |= Updated
	}
	if _, ok := p.(DeregisteredInterface); ok {
		m |= Deregistered
	}
	if _, ok := p.(ResetInterface); ok {
		m |= Reset
	}
	if _, ok := p.(ExpiredInterface); ok {
		m |= Expired
	}
	if _, ok := p.(HealthInterface); ok {
		m |= Health
	}
	return m
}
