package check

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// inst is one instance in the model.
type inst struct {
	Alloc, Value, NodeID, Socket string
	Health                       string // who marked it suspect; "" passing
	TTL                          string // its lease ("3s"); "" none
	Modify                       uint64
}

// Registry is an independent model of the registry semantics of
// DESIGN.md: per (type, name) a recency list, newest first. It is what the
// checkers replay the ground truth with.
type Registry struct {
	lists map[[2]string][]inst
}

// NewRegistry returns the empty registry.
func NewRegistry() *Registry { return &Registry{lists: map[[2]string][]inst{}} }

// ModelEvent is an event the model says an entry emits.
type ModelEvent struct {
	Index     uint64
	EventType string
	Info      Plugin
	Current   *Plugin
}

func (e ModelEvent) String() string {
	cur := "-"
	if e.Current != nil {
		cur = e.Current.Alloc + "=" + e.Current.Value
	}
	return fmt.Sprintf("%d %s %s/%s/%s=%s cur=%s", e.Index, e.EventType, e.Info.Type, e.Info.Name, e.Info.Alloc, e.Info.Value, cur)
}

// pluginReq is a journaled registration's plugin.
type pluginReq struct {
	Type, Name, AllocID, Version, NodeID string
	ConnectionInfo                       *struct{ SocketPath, Address string }
	Health                               *struct{ Check string }
	TTL                                  string
}

// request is the part of a journaled command the model needs.
type request struct {
	Plugin              *pluginReq
	Type, Name, AllocID string // deregister, conditional-deregister
	IfNodeID            string // conditional-deregister, conditional-register, host-sync
	IfModifyIndex       uint64 // conditional-deregister
	NodeID              string // deregister-node, node-health, host-sync
	Suspect             bool   // node-health
	Leases              []struct {
		Type, Name, AllocID string
		ModifyIndex         uint64
	} // expire
	Register   []*pluginReq // host-sync
	Deregister []struct {
		Type, Name, AllocID string
		IfModifyIndex       uint64
	} // host-sync
	Nodes []struct {
		NodeID  string
		Suspect bool
	} // node-health-batch
}

// Apply applies one journaled command and returns its result and events.
func (r *Registry) Apply(index uint64, command string, raw json.RawMessage) (string, []ModelEvent) {
	var req request
	json.Unmarshal(raw, &req)
	switch command {
	case "register", "conditional-register":
		if req.Plugin == nil {
			return "", nil
		}
		p := req.Plugin
		if command == "conditional-register" && r.ownedElsewhere(p.Type, p.Name, p.AllocID, req.IfNodeID) {
			// What a node-bound agent token writes.
			return "conflict", nil
		}
		return r.registerPlugin(index, p)
	case "host-sync":
		return r.HostSync(index, req)
	case "node-health-batch":
		var evs []ModelEvent
		for _, n := range req.Nodes {
			_, e := r.NodeHealth(index, n.NodeID, n.Suspect)
			evs = append(evs, e...)
		}
		if len(evs) == 0 {
			return "unchanged", nil
		}
		return "health", evs
	case "deregister":
		return r.Deregister(index, req.Type, req.Name, req.AllocID)
	case "conditional-deregister":
		// What agents write for the plugins they host (stub plugins).
		return r.DeregisterIf(index, req.Type, req.Name, req.AllocID, req.IfNodeID, req.IfModifyIndex)
	case "deregister-node":
		return r.DeregisterNode(index, req.NodeID)
	case "node-health":
		return r.NodeHealth(index, req.NodeID, req.Suspect)
	case "expire":
		return r.Expire(index, req)
	case "state-check", "padding":
		// Entries that change nothing (the servers' cross-replica
		// state check; a restore's padding).
		return "ignored", nil
	}
	return "", nil
}

// registerPlugin registers p.
func (r *Registry) registerPlugin(index uint64, p *pluginReq) (string, []ModelEvent) {
	sock := ""
	if p.ConnectionInfo != nil {
		sock = p.ConnectionInfo.SocketPath + "|" + p.ConnectionInfo.Address
	}
	health := ""
	if p.Health != nil {
		health = p.Health.Check
	}
	return r.Register(index, p.Type, p.Name, inst{Alloc: p.AllocID, Value: p.Version, NodeID: p.NodeID, Socket: sock, Health: health, TTL: p.TTL})
}

// HostSync applies a host's round in one entry as its single writes: each
// registration (conditional on the owner with IfNodeID), then each
// removal conditional on the host's node (and its ModifyIndex when set);
// a write its condition refuses changes nothing. "synced" if any changed
// an instance, else "unchanged".
func (r *Registry) HostSync(index uint64, req request) (string, []ModelEvent) {
	var evs []ModelEvent
	for _, p := range req.Register {
		if req.IfNodeID != "" && r.ownedElsewhere(p.Type, p.Name, p.AllocID, req.IfNodeID) {
			continue
		}
		_, e := r.registerPlugin(index, p)
		evs = append(evs, e...)
	}
	for _, d := range req.Deregister {
		_, e := r.DeregisterIf(index, d.Type, d.Name, d.AllocID, req.NodeID, d.IfModifyIndex)
		evs = append(evs, e...)
	}
	if len(evs) == 0 {
		return "unchanged", nil
	}
	return "synced", evs
}

// Expire removes each named instance that is still the leased
// registration its lease ran out for (the same ModifyIndex, a TTL), with
// an expired event each: "expired" if it removed any, else "absent".
func (r *Registry) Expire(index uint64, req request) (string, []ModelEvent) {
	var evs []ModelEvent
	for _, l := range req.Leases {
		k := [2]string{l.Type, l.Name}
		for i, x := range r.lists[k] {
			if x.Alloc != l.AllocID || x.Modify != l.ModifyIndex || x.TTL == "" {
				continue
			}
			r.remove(k, i)
			evs = append(evs, ModelEvent{Index: index, EventType: "expired", Info: plug(k[0], k[1], x), Current: r.front(k)})
			break
		}
	}
	if len(evs) == 0 {
		return "absent", nil
	}
	return "expired", evs
}

func plug(t, n string, in inst) Plugin {
	return Plugin{Type: t, Name: n, Alloc: in.Alloc, Value: in.Value, ModifyIndex: in.Modify}
}

func (r *Registry) front(k [2]string) *Plugin {
	if l := r.lists[k]; len(l) > 0 {
		p := plug(k[0], k[1], l[0])
		return &p
	}
	return nil
}

// Register adds or updates an instance.
func (r *Registry) Register(index uint64, t, n string, in inst) (string, []ModelEvent) {
	k := [2]string{t, n}
	l := r.lists[k]
	pos := -1
	for i, x := range l {
		if x.Alloc == in.Alloc {
			pos = i
		}
	}
	if pos >= 0 && l[pos].Value == in.Value && l[pos].NodeID == in.NodeID && l[pos].Socket == in.Socket && l[pos].TTL == in.TTL {
		if l[pos].Health == in.Health {
			return "unchanged", nil
		}
		// Health alone: the instance keeps its place.
		return "updated", r.setHealth(index, k, pos, in.Health)
	}
	in.Modify = index
	res := "registered"
	nl := []inst{in}
	for i, x := range l {
		if i == pos {
			res = "updated"
			continue
		}
		nl = append(nl, x)
	}
	r.lists[k] = nl
	return res, []ModelEvent{{Index: index, EventType: res, Info: plug(t, n, in), Current: r.front(k)}}
}

// Deregister removes an instance.
func (r *Registry) Deregister(index uint64, t, n, alloc string) (string, []ModelEvent) {
	k := [2]string{t, n}
	l := r.lists[k]
	for i, x := range l {
		if x.Alloc == alloc {
			r.remove(k, i)
			return "deregistered", []ModelEvent{{Index: index, EventType: "deregistered", Info: plug(t, n, x), Current: r.front(k)}}
		}
	}
	return "absent", nil
}

// remove takes the instance at i out of k's list (and the list out of
// the registry once empty).
func (r *Registry) remove(k [2]string, i int) {
	nl := append(append([]inst{}, r.lists[k][:i]...), r.lists[k][i+1:]...)
	if len(nl) == 0 {
		delete(r.lists, k)
	} else {
		r.lists[k] = nl
	}
}

// DeregisterIf removes an instance if it still belongs to node and was
// last changed at modify (each when set). A refusal is "conflict": the
// FSM answers it with an error, which the merged truth leaves out, so the
// model saying it where the FSM removed is a disagreement Merge reports.
func (r *Registry) DeregisterIf(index uint64, t, n, alloc, node string, modify uint64) (string, []ModelEvent) {
	for _, x := range r.lists[[2]string{t, n}] {
		if x.Alloc == alloc && (node != "" && x.NodeID != node || modify != 0 && x.Modify != modify) {
			return "conflict", nil
		}
	}
	return r.Deregister(index, t, n, alloc)
}

// ownedElsewhere reports whether the instance exists and belongs to
// another node than node: a conditional registration's refusal.
func (r *Registry) ownedElsewhere(t, n, alloc, node string) bool {
	for _, x := range r.lists[[2]string{t, n}] {
		if x.Alloc == alloc {
			return x.NodeID != node
		}
	}
	return false
}

// DeregisterNode removes every instance of a node, by (type, name) order.
func (r *Registry) DeregisterNode(index uint64, node string) (string, []ModelEvent) {
	var evs []ModelEvent
	for _, k := range r.keys(nil) {
		for _, x := range append([]inst{}, r.lists[k]...) {
			if x.NodeID == node {
				_, e := r.Deregister(index, k[0], k[1], x.Alloc)
				evs = append(evs, e...)
			}
		}
	}
	if len(evs) == 0 {
		return "absent", nil
	}
	return "deregistered", evs
}

// setHealth changes the health of the instance at pos of k's list, in
// place, and returns its health event.
func (r *Registry) setHealth(index uint64, k [2]string, pos int, health string) []ModelEvent {
	nl := append([]inst{}, r.lists[k]...)
	nl[pos].Health, nl[pos].Modify = health, index
	r.lists[k] = nl
	return []ModelEvent{{Index: index, EventType: "health", Info: plug(k[0], k[1], nl[pos]), Current: r.front(k)}}
}

// NodeHealth marks the node's instances that are passing suspect ("node"),
// or clears the node's marks and no other, by (type, name, alloc): the
// order of the FSM's node index.
func (r *Registry) NodeHealth(index uint64, node string, suspect bool) (string, []ModelEvent) {
	var evs []ModelEvent
	for _, k := range r.keys(nil) {
		var mine []string
		for _, x := range r.lists[k] {
			if x.NodeID == node {
				mine = append(mine, x.Alloc)
			}
		}
		sort.Strings(mine)
		for _, alloc := range mine {
			for pos, x := range r.lists[k] {
				switch {
				case x.Alloc != alloc:
				case suspect && x.Health == "":
					evs = append(evs, r.setHealth(index, k, pos, "node")...)
				case !suspect && x.Health == "node":
					evs = append(evs, r.setHealth(index, k, pos, "")...)
				}
			}
		}
	}
	if len(evs) == 0 {
		return "unchanged", nil
	}
	return "health", evs
}

func (r *Registry) keys(types []string) [][2]string {
	var ks [][2]string
	for k := range r.lists {
		if len(types) == 0 || contains(types, k[0]) {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i][0] != ks[j][0] {
			return ks[i][0] < ks[j][0]
		}
		return ks[i][1] < ks[j][1]
	})
	return ks
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// List is the newest instance of every name of type t, by name.
func (r *Registry) List(t string) []Item {
	var out []Item
	for _, k := range r.keys([]string{t}) {
		x := r.lists[k][0]
		out = append(out, Item{Name: k[1], Alloc: x.Alloc, Value: x.Value})
	}
	return out
}

// Get returns an instance's value.
func (r *Registry) Get(t, n, alloc string) (string, bool) {
	for _, x := range r.lists[[2]string{t, n}] {
		if x.Alloc == alloc {
			return x.Value, true
		}
	}
	return "", false
}

// All is every instance of the types (all when empty), by type, name,
// newest first: the content of a reset.
func (r *Registry) All(types []string) []Plugin {
	var out []Plugin
	for _, k := range r.keys(types) {
		for _, x := range r.lists[k] {
			out = append(out, plug(k[0], k[1], x))
		}
	}
	return out
}

func renderItems(items []Item) string {
	var b strings.Builder
	for _, it := range items {
		fmt.Fprintf(&b, "%s/%s=%s ", it.Name, it.Alloc, it.Value)
	}
	return strings.TrimSpace(b.String())
}

func renderPlugins(ps []Plugin) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s/%s/%s=%s@%d ", p.Type, p.Name, p.Alloc, p.Value, p.ModifyIndex)
	}
	return strings.TrimSpace(b.String())
}
