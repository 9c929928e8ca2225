package fsm

import "github.com/plugreg/plugreg/api"

// validateNew checks what only a new command must satisfy, beyond
// Validate, which decoding a log entry also runs: a registration's
// identity is no "." or ".." (api.ValidateNewPlugin). An entry of an
// older release that holds one still decodes and applies as it did, and
// deregistrations, which may name what such an entry created, are not
// checked.
func validateNew(req Request) error {
	switch r := req.(type) {
	case *RegisterRequest:
		return api.ValidateNewPlugin(r.Plugin)
	case *ConditionalRegisterRequest:
		return api.ValidateNewPlugin(r.Plugin)
	case *HostSyncRequest:
		for _, p := range r.Register {
			if err := api.ValidateNewPlugin(p); err != nil {
				return err
			}
		}
	}
	return nil
}
