package fanout

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
)

// Upstream opens one event subscription at a server: the events with
// index > *from (or, when from is nil, from the server's current applied
// index). Its first event is a heartbeat carrying the starting position.
// The channel closes when the subscription breaks (server died, connection
// cut) or ctx ends. It should send heartbeats while idle, more often than
// Config.StallTimeout. types is sorted and de-duplicated; none means all.
type Upstream func(ctx context.Context, types []string, from *uint64) (<-chan *api.Event, error)

// Config wires a Hub.
type Config struct {
	// Upstream opens server subscriptions. Required.
	Upstream Upstream
	// Buffer is the number of events kept per filter, for subscribers
	// that fall behind or resume. Zero: 4096.
	Buffer int
	// SubscriberBuffer is each subscriber channel's capacity. Zero: 64.
	SubscriberBuffer int
	// StallTimeout: an upstream silent this long (no event, no heartbeat)
	// is abandoned and reopened. Zero: 15s.
	StallTimeout time.Duration
	// Linger: an upstream is closed this long after its last subscriber
	// left. Zero: 30s.
	Linger time.Duration
	// RetryMin and RetryMax bound the jittered backoff between reopens of
	// a broken upstream. Zero: 100ms and 5s.
	RetryMin, RetryMax time.Duration
	// DrainTimeout bounds the wait for a closed upstream's channel to
	// close. Zero: 5s.
	DrainTimeout time.Duration
	// MaxUpstreams bounds the server subscriptions open at once (one per
	// distinct filter, lingering ones included): each holds a server's
	// stream and Buffer events. Past it, a subscription with a new filter
	// is refused with api.ErrTooManyRequests; filters already open still
	// serve. Zero: 256; negative: no bound.
	MaxUpstreams int
	// Logger; nil: none.
	Logger hclog.Logger
}

// DefaultConfig returns a Config with every default set and no Upstream.
func DefaultConfig() Config {
	return Config{
		Buffer:           4096,
		SubscriberBuffer: 64,
		StallTimeout:     15 * time.Second,
		Linger:           30 * time.Second,
		RetryMin:         100 * time.Millisecond,
		RetryMax:         5 * time.Second,
		DrainTimeout:     5 * time.Second,
		MaxUpstreams:     256,
		Logger:           hclog.NewNullLogger(),
	}
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Buffer == 0 {
		c.Buffer = d.Buffer
	}
	if c.SubscriberBuffer == 0 {
		c.SubscriberBuffer = d.SubscriberBuffer
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = d.StallTimeout
	}
	if c.Linger == 0 {
		c.Linger = d.Linger
	}
	if c.RetryMin == 0 {
		c.RetryMin = d.RetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(d.RetryMax, c.RetryMin)
	}
	if c.MaxUpstreams == 0 {
		c.MaxUpstreams = d.MaxUpstreams
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// Validate checks the fields against each other.
func (c *Config) Validate() error {
	switch {
	case c.Upstream == nil:
		return fmt.Errorf("fanout: config needs an Upstream")
	case c.Buffer < 0, c.SubscriberBuffer < 0:
		return fmt.Errorf("fanout: Buffer %d and SubscriberBuffer %d must not be negative", c.Buffer, c.SubscriberBuffer)
	case c.StallTimeout < 0, c.Linger < 0, c.RetryMin < 0, c.DrainTimeout < 0:
		return fmt.Errorf("fanout: durations must not be negative")
	case c.RetryMax != 0 && c.RetryMax < c.RetryMin:
		return fmt.Errorf("fanout: RetryMax %v is below RetryMin %v", c.RetryMax, c.RetryMin)
	}
	return nil
}
