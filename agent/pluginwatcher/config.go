package pluginwatcher

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Config configures a Watcher. Start from DefaultConfig and set Dir,
// NodeID and Registrar.
type Config struct {
	// Dir is the plugins directory, watched with its subdirectories
	// (kubelet's /var/lib/kubelet/plugins_registry). Required; it must
	// exist and be a readable directory when New is called.
	Dir string

	// NodeID is this host's node ID, stamped on every registration and
	// part of every AllocID. Required.
	NodeID string

	// Registrar receives the registrations. Required.
	Registrar Registrar

	// Mode says whether kubelet watches Dir too (ModeShared: plugreg
	// never sends NotifyRegistrationStatus) or plugreg alone
	// (ModeOwned: plugreg tells its plugins). Zero: ModeAuto, which is
	// ModeShared for a Dir named KubeletDirName (before or after its
	// symbolic links are resolved) and ModeOwned for any other.
	Mode Mode

	// Logger receives the watcher's log lines. Zero: hclog's null logger.
	Logger hclog.Logger

	// GetInfoTimeout bounds every call to a plugin: the dial plus GetInfo,
	// and NotifyRegistrationStatus. Zero: DefaultGetInfoTimeout.
	GetInfoTimeout time.Duration

	// ProbeInterval is how often every live socket is asked GetInfo again
	// once it has answered; a registered plugin that stops answering is
	// deregistered. Zero: DefaultProbeInterval. Negative: never probe.
	ProbeInterval time.Duration

	// SlowProbes is how many probes in a row a registered plugin may let
	// time out, while its socket still accepts connections, before it is
	// deregistered. A plugin whose socket refuses connections (it died)
	// is deregistered at its first failed probe; one that is merely slow
	// (a loaded host: the scale bench saw healthy plugins time out) is
	// given this many chances, probed again after RetryMin each time.
	// Zero: DefaultSlowProbes.
	SlowProbes int

	// RetryMin and RetryMax bound the jittered exponential backoff after a
	// failed step (GetInfo, validation, Register, Deregister). Zero:
	// DefaultRetryMin, DefaultRetryMax.
	RetryMin time.Duration
	RetryMax time.Duration

	// Handlers overrides the validation of a plugin type (the GetInfo
	// type, e.g. "CSIPlugin"). Types absent here use the built-in handler
	// (CSIPlugin, DRAPlugin, DevicePlugin) or Generic. Nil: built-ins only.
	Handlers map[string]Handler
}

// Defaults for the zero values of Config.
const (
	// DefaultGetInfoTimeout is 5 s. kubelet gives GetInfo 1 s when it
	// registers and 10 s when it checks a connection, and Notify 5 s. A
	// local plugin answers in microseconds, so 5 s is a hung plugin, not a
	// busy host; 1 s would deregister healthy plugins on a loaded machine,
	// and the bound is also how long a hung socket holds its own probe.
	DefaultGetInfoTimeout = 5 * time.Second
	// DefaultProbeInterval is kubelet's connection-check interval.
	DefaultProbeInterval = 10 * time.Second
	// DefaultSlowProbes: three timed-out probes in a row (about 15 s of
	// GetInfo timeouts plus the retries) before a plugin that still accepts
	// connections is taken for dead.
	DefaultSlowProbes = 3
	// DefaultRetryMin and DefaultRetryMax bound the backoff after a
	// failed step (kubelet: 500 ms doubling to about 2 min).
	DefaultRetryMin = 500 * time.Millisecond
	DefaultRetryMax = 30 * time.Second
)

// Validate checks the fields and their relations. It does not look at the
// file system; New does.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("%w: Dir is empty", ErrConfig)
	}
	if c.NodeID == "" {
		return fmt.Errorf("%w: NodeID is empty", ErrConfig)
	}
	if c.Registrar == nil {
		return fmt.Errorf("%w: Registrar is nil", ErrConfig)
	}
	if !c.Mode.valid() {
		return c.Mode.invalid("Mode")
	}
	if c.GetInfoTimeout < 0 {
		return fmt.Errorf("%w: GetInfoTimeout %v is negative", ErrConfig, c.GetInfoTimeout)
	}
	if c.RetryMin < 0 || c.RetryMax < 0 {
		return fmt.Errorf("%w: RetryMin %v or RetryMax %v is negative", ErrConfig, c.RetryMin, c.RetryMax)
	}
	c2 := c.withDefaults()
	if c2.RetryMax < c2.RetryMin {
		return fmt.Errorf("%w: RetryMax %v is below RetryMin %v", ErrConfig, c2.RetryMax, c2.RetryMin)
	}
	for typ, h := range c.Handlers {
		if h == nil {
			return fmt.Errorf("%w: Handlers[%q] is nil", ErrConfig, typ)
		}
	}
	return nil
}

// withDefaults returns a copy with the zero values replaced.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.GetInfoTimeout == 0 {
		c.GetInfoTimeout = DefaultGetInfoTimeout
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.SlowProbes == 0 {
		c.SlowProbes = DefaultSlowProbes
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	return c
}
