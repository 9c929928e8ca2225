package pluginwatcher

import (
	"fmt"
	"path/filepath"

	"github.com/plugreg/plugreg/api"
)

// Mode says who answers the plugins of a plugins dir: kubelet, which
// watches the same dir (ModeShared), or plugreg alone (ModeOwned).
//
// A plugin is told its registration status once, by whoever registers it,
// and some plugins act on it: CSI's node-driver-registrar exits on
// NotifyRegistrationStatus(false) (kubernetes/kubernetes#69992). In
// kubelet's own dir, a "false" from plugreg during a leader election would
// restart every registrar sidecar on every host though kubelet accepted
// them, and a "true" from plugreg would tell a plugin kubelet refused that
// it is registered. So plugreg speaks to a plugin only in a dir it owns.
type Mode string

const (
	// ModeAuto (and ""): ModeShared for a dir named KubeletDirName,
	// ModeOwned for any other.
	ModeAuto Mode = "auto"
	// ModeShared: kubelet watches the dir too and answers its plugins.
	// plugreg only asks GetInfo (and probes), never sends
	// NotifyRegistrationStatus, and retries its own writes, with
	// backoff, until they succeed.
	ModeShared Mode = "shared"
	// ModeOwned: the plugins register with plugreg alone. plugreg tells
	// a plugin "registered" once it is, and "not registered" only when
	// the plugin itself is refused (refusesPlugin); its own failures (no
	// leader, no server, a timeout, stopping) are retried in silence.
	ModeOwned Mode = "owned"
)

// KubeletDirName is the name of kubelet's plugins dir,
// /var/lib/kubelet/plugins_registry: ModeAuto takes a dir of that name
// for kubelet's.
const KubeletDirName = "plugins_registry"

// ParseMode reads a mode as an operator writes it ("" is ModeAuto).
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	if !m.valid() {
		return "", m.invalid("mode")
	}
	return m.orAuto(), nil
}

// invalid is the one refusal of a mode that is not one; what names it
// ("mode" for an operator's word, "Mode" for Config's field).
func (m Mode) invalid(what string) error {
	return fmt.Errorf("%w: %s %q: want %s, %s or %s", ErrConfig, what, string(m), ModeAuto, ModeShared, ModeOwned)
}

func (m Mode) valid() bool {
	switch m {
	case "", ModeAuto, ModeShared, ModeOwned:
		return true
	}
	return false
}

func (m Mode) orAuto() Mode {
	if m == "" {
		return ModeAuto
	}
	return m
}

// Resolve returns the mode a watcher of dir runs in: m itself, or for
// ModeAuto the one dir's name implies (ModeShared for KubeletDirName,
// which kubelet watches; ModeOwned otherwise).
func (m Mode) Resolve(dir string) Mode {
	if m.orAuto() != ModeAuto {
		return m
	}
	if filepath.Base(filepath.Clean(dir)) == KubeletDirName {
		return ModeShared
	}
	return ModeOwned
}

// refusesPlugin reports whether a failed Register refused the plugin
// itself, which an owned dir's plugin is told: its registration is
// invalid or too large, or its type is not this agent's to register.
// Every other failure is plugreg's own (no leader, no server, a timeout,
// shutdown, leadership lost, a limit reached, an agent token the servers
// do not know, an error nobody classified): the watcher retries it, and
// telling the plugin "not registered" would only make some plugins exit.
func refusesPlugin(err error) bool {
	switch api.ErrorCode(err) {
	case api.CodeInvalid, api.CodeTooLarge, api.CodePermissionDenied:
		return true
	}
	return false
}
