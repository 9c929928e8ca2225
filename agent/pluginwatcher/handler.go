package pluginwatcher

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/plugreg/plugreg/api"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Handler validates the GetInfo answer of one plugin type, as kubelet's
// PluginHandler.ValidatePlugin does. Registering and deregistering are the
// Registrar's job, the same for every type.
//
// The watcher has already checked that the type and name are valid
// identifiers (api.ValidateIdentifier); a Handler adds the type's rules.
type Handler interface {
	// Validate returns the version the registration records (the one a
	// consumer should speak) or an error wrapping api.ErrInvalid.
	// endpoint is GetInfo's endpoint, defaulted to the registration socket.
	Validate(name, endpoint string, versions []string) (version string, err error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(name, endpoint string, versions []string) (string, error)

// Validate calls f.
func (f HandlerFunc) Validate(name, endpoint string, versions []string) (string, error) {
	return f(name, endpoint, versions)
}

// Built-in handlers, chosen by the GetInfo type.
var (
	// CSI accepts a CSI node plugin (via node-driver-registrar) as kubelet
	// does: at least one version parses as a generic version
	// ("1.0.0", "v1.2"), versions of major 2 and above are ignored, and the
	// highest of the rest must be 1.x. The registration's Version is that
	// version, as the plugin wrote it.
	CSI Handler = HandlerFunc(validateCSI)

	// DRA accepts a DRA kubelet plugin (kubelet 1.34+): its versions are
	// gRPC service names, and one must be a service kubelet speaks,
	// DRAServices. Its name must be a DNS subdomain, as kubelet checks. The
	// registration's Version is the newest known service it offers.
	DRA Handler = HandlerFunc(validateDRA)

	// Device accepts a device plugin that registers through the plugins
	// dir: one of its versions must be in DeviceVersions.
	Device Handler = HandlerFunc(validateDevice)

	// Generic accepts any type whose type and name are valid identifiers;
	// the registration's Version is the first version listed, if any.
	Generic Handler = HandlerFunc(validateGeneric)
)

// DRAServices are the DRA gRPC services kubelet 1.34+ speaks, newest first.
var DRAServices = []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}

// DeviceVersions are the device plugin API versions kubelet speaks.
var DeviceVersions = []string{"v1beta1"}

func builtinHandler(typ string) Handler {
	switch typ {
	case registerapi.CSIPlugin:
		return CSI
	case registerapi.DRAPlugin:
		return DRA
	case registerapi.DevicePlugin:
		return Device
	}
	return Generic
}

func validateCSI(name, _ string, versions []string) (string, error) {
	if len(versions) == 0 {
		return "", fmt.Errorf("%w: CSI driver %q lists no supported versions", api.ErrInvalid, name)
	}
	best, bestStr := []uint64(nil), ""
	var firstErr error
	for _, v := range versions {
		parsed, err := parseGenericVersion(v)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if parsed[0] > 1 {
			continue // a CSI 2.x is not promised to be compatible with 1.x
		}
		if best == nil || versionLess(best, parsed) {
			best, bestStr = parsed, v
		}
	}
	if best == nil {
		return "", fmt.Errorf("%w: CSI driver %q: none of the versions %q is usable (%v)", api.ErrInvalid, name, versions, firstErr)
	}
	if best[0] != 1 {
		return "", fmt.Errorf("%w: CSI driver %q: highest supported version %q, must be 1.x", api.ErrInvalid, name, bestStr)
	}
	return bestStr, nil
}

// parseGenericVersion parses what kubelet's version.ParseGeneric accepts:
// an optional "v", two or more dot-separated numbers (the first without a
// leading zero), then anything.
func parseGenericVersion(s string) ([]uint64, error) {
	rest := strings.TrimPrefix(strings.TrimSpace(s), "v")
	end := 0
	for end < len(rest) && (rest[end] == '.' || (rest[end] >= '0' && rest[end] <= '9')) {
		end++
	}
	num := strings.TrimRight(rest[:end], ".")
	parts := strings.Split(num, ".")
	if num == "" || len(parts) < 2 {
		return nil, fmt.Errorf("version %q: want at least major.minor", s)
	}
	if len(parts[0]) > 1 && parts[0][0] == '0' {
		return nil, fmt.Errorf("version %q: zero-prefixed major", s)
	}
	out := make([]uint64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("version %q: %v", s, err)
		}
		out[i] = n
	}
	return out, nil
}

func versionLess(a, b []uint64) bool {
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y uint64
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func validateDRA(name, _ string, versions []string) (string, error) {
	if err := validateDNSSubdomain(name); err != nil {
		return "", fmt.Errorf("%w: DRA driver name %q: %v", api.ErrInvalid, name, err)
	}
	if len(versions) == 0 {
		return "", fmt.Errorf("%w: DRA driver %q lists no supported services", api.ErrInvalid, name)
	}
	for _, known := range DRAServices {
		if slices.Contains(versions, known) {
			return known, nil
		}
	}
	return "", fmt.Errorf("%w: DRA driver %q: none of the services %q is one of %q", api.ErrInvalid, name, versions, DRAServices)
}

// validateDNSSubdomain checks RFC 1123 subdomain syntax, kubelet's rule for
// a DRA driver name: at most 253 bytes of lower-case alphanumerics, '-' and
// '.', each dot-separated label starting and ending alphanumeric.
func validateDNSSubdomain(s string) error {
	if len(s) > 253 {
		return fmt.Errorf("longer than 253 bytes")
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return fmt.Errorf("empty label")
		}
		for i, r := range label {
			alnum := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
			if !alnum && (r != '-' || i == 0 || i == len(label)-1) {
				return fmt.Errorf("not a lower-case RFC 1123 subdomain")
			}
		}
	}
	return nil
}

func validateDevice(name, _ string, versions []string) (string, error) {
	for _, known := range DeviceVersions {
		if slices.Contains(versions, known) {
			return known, nil
		}
	}
	return "", fmt.Errorf("%w: device plugin %q: none of the versions %q is one of %q", api.ErrInvalid, name, versions, DeviceVersions)
}

func validateGeneric(_, _ string, versions []string) (string, error) {
	if len(versions) > 0 {
		return versions[0], nil
	}
	return "", nil
}
