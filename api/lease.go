package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Leases. A registration may carry a TTL (PluginInfo.TTL): the instance
// then stays registered only while its holder renews it (PUT
// /v1/plugins/{type}/{name}/{alloc}/renew) at least once a TTL. Renewals
// never go through the log: the leader keeps each leased instance's
// deadline in memory and proposes the expiry of those that pass it
// (etcd's lessor). A registration without a TTL lives until it is
// deregistered.
const (
	// MinTTL is the shortest lease: shorter ones would mostly measure
	// elections and a busy leader's ticks.
	MinTTL = time.Second
	// MaxTTL is the longest: past a day a holder that died is not worth
	// a lease.
	MaxTTL = 24 * time.Hour
)

// Duration is a time.Duration that JSON carries as Go's duration string
// ("30s", "1m30s"), as Consul's TTLs are written. Its msgpack form (the
// log, snapshots, the internal RPC) is the plain integer of nanoseconds.
type Duration time.Duration

// String is the Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string; a number is refused (is 30 thirty
// seconds or thirty nanoseconds?). null changes nothing, as for any field.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	// The error cannot name its field (encoding/json does not say which
	// one it was decoding): it says TTL, which every field of this type is.
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a TTL (a duration) is a string such as \"30s\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("a TTL (a duration) is a string such as \"30s\", not %q", s)
	}
	*d = Duration(v)
	return nil
}

// ValidateTTL checks a registration's TTL: zero (no lease), or MinTTL to
// MaxTTL.
func ValidateTTL(ttl Duration) error {
	if ttl != 0 && (time.Duration(ttl) < MinTTL || time.Duration(ttl) > MaxTTL) {
		return fmt.Errorf("%w: TTL %s: want %s to %s, or none (no lease)", ErrInvalid, ttl, MinTTL, MaxTTL)
	}
	return nil
}

// RenewRequest renews the lease of one instance: its deadline becomes the
// leader's now plus its TTL. With IfNodeID set the renewal is refused
// (ErrConflict) unless the instance belongs to that node: a node-bound
// token's renewals carry its node (authz.Renew), as its deregistrations
// do.
type RenewRequest struct {
	Type, Name, AllocID string
	IfNodeID            string `json:",omitempty"`
}

// Validate checks r as a request.
func (r *RenewRequest) Validate() error {
	if err := ValidateInstanceID(r.Type, r.Name, r.AllocID); err != nil {
		return err
	}
	if r.IfNodeID != "" {
		return ValidateIdentifier("node", r.IfNodeID)
	}
	return nil
}

// RenewResult answers a renewal: the lease's TTL, which now runs from the
// moment the leader took the renewal. A holder renews again well within
// it (the Go client's KeepAlive: every third).
type RenewResult struct {
	TTL Duration
}
