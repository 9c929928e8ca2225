package api

import "fmt"

// Bounds on one HostSyncRequest: what one log entry carries. A host with
// more to write (its round after a restart, a host of thousands of
// plugins) sends several.
const (
	// MaxHostSyncWrites bounds the registrations and deregistrations of
	// one request together.
	MaxHostSyncWrites = 1000
	// MaxHostSyncBytes bounds the request's size as HostSyncRequest.Size
	// counts it: within the 1 MiB a client agent's call may carry, in
	// its msgpack form as in the log's protobuf one.
	MaxHostSyncBytes = 640 << 10
	// hostSyncOverhead is what Size adds per write for what its strings
	// do not count (field names and lengths, indexes, the lease): more
	// than either encoding spends.
	hostSyncOverhead = 256
)

// HostSyncRequest is one host's anti-entropy writes as one: its
// registrations, and the removal of the instances it no longer has, in a
// single log entry (Consul's agent syncs its services one by one; a
// fleet's restart then costs one entry per plugin instead of one per
// host). Each registration and deregistration applies as its single
// write would, with the same events, in order: the registrations first.
//
// Every registration is of NodeID (p.NodeID); a node-bound caller's are
// conditional on the instance they replace belonging to NodeID, as its
// single registrations are (the server derives that from the caller's
// identity; no caller sends it). Every deregistration is conditional on
// the instance belonging to NodeID and, when IfModifyIndex is set, on its
// ModifyIndex: what an agent removes is only ever its own.
type HostSyncRequest struct {
	NodeID     string
	Register   []*PluginInfo        `json:",omitempty"`
	Deregister []HostDeregistration `json:",omitempty"`
}

// HostDeregistration is one removal of a HostSyncRequest, conditional on
// the request's node.
type HostDeregistration struct {
	Type, Name, AllocID string
	IfModifyIndex       uint64 `json:",omitempty"`
}

// Writes is how many registrations and deregistrations r carries.
func (r *HostSyncRequest) Writes() int { return len(r.Register) + len(r.Deregister) }

// Size is r's size as MaxHostSyncBytes bounds it.
func (r *HostSyncRequest) Size() int {
	n := len(r.NodeID)
	for _, p := range r.Register {
		n += HostSyncSize(p)
	}
	for _, d := range r.Deregister {
		n += d.Size()
	}
	return n
}

// Size is what d adds to a HostSyncRequest's Size.
func (d HostDeregistration) Size() int {
	return len(d.Type) + len(d.Name) + len(d.AllocID) + hostSyncOverhead
}

// HostSyncSize is what registering p adds to a HostSyncRequest's Size:
// what a sender that splits its writes counts.
func HostSyncSize(p *PluginInfo) int {
	n := len(p.Type) + len(p.Name) + len(p.AllocID) + len(p.Version) + len(p.NodeID) + hostSyncOverhead
	if ci := p.ConnectionInfo; ci != nil {
		n += len(ci.SocketPath) + len(ci.Address)
	}
	for k, v := range p.Options {
		n += len(k) + len(v)
	}
	if h := p.Health; h != nil {
		n += len(h.Status) + len(h.Check) + len(h.Reason)
	}
	return n
}

// Validate checks r as a request: each write as its single form is
// checked, each registration of NodeID, no instance twice, and r within
// its bounds (ErrTooLarge). A request that writes nothing is invalid.
func (r *HostSyncRequest) Validate() error {
	if err := ValidateIdentifier("NodeID", r.NodeID); err != nil {
		return fmt.Errorf("host sync: %w", err)
	}
	switch n := r.Writes(); {
	case n == 0:
		return fmt.Errorf("%w: host sync of node %s writes nothing", ErrInvalid, r.NodeID)
	case n > MaxHostSyncWrites:
		return fmt.Errorf("%w: host sync of node %s: %d writes, at most %d in one (send several)", ErrTooLarge, r.NodeID, n, MaxHostSyncWrites)
	}
	if n := r.Size(); n > MaxHostSyncBytes {
		return fmt.Errorf("%w: host sync of node %s: %d bytes, at most %d in one (send several)", ErrTooLarge, r.NodeID, n, MaxHostSyncBytes)
	}
	seen := make(map[[3]string]bool, r.Writes())
	once := func(t, n, a string) error {
		k := [3]string{t, n, a}
		if seen[k] {
			return fmt.Errorf("%w: host sync of node %s: %s/%s/%s written twice", ErrInvalid, r.NodeID, t, n, a)
		}
		seen[k] = true
		return nil
	}
	for _, p := range r.Register {
		if err := ValidatePlugin(p); err != nil {
			return fmt.Errorf("host sync of node %s: %w", r.NodeID, err)
		}
		if p.NodeID != r.NodeID {
			return fmt.Errorf("%w: host sync of node %s registers %s/%s/%s of node %q", ErrInvalid, r.NodeID, p.Type, p.Name, p.AllocID, p.NodeID)
		}
		if err := once(p.Type, p.Name, p.AllocID); err != nil {
			return err
		}
	}
	for _, d := range r.Deregister {
		if err := ValidateInstanceID(d.Type, d.Name, d.AllocID); err != nil {
			return fmt.Errorf("host sync of node %s: %w", r.NodeID, err)
		}
		if err := once(d.Type, d.Name, d.AllocID); err != nil {
			return err
		}
	}
	return nil
}

// HostSyncResult is what a HostSyncRequest did: its entry's index, and
// the writes its conditions left alone, as positions in the request
// (registrations first, then deregistrations). A registration left alone
// is an instance another node owns (a conflict, as its single write
// would have been); a deregistration left alone is an instance another
// node has taken over or that changed since it was read, which is not
// the host's to remove.
type HostSyncResult struct {
	Index   uint64
	Result  Result
	Refused []int `json:",omitempty"`
}
