package fsm

import (
	"fmt"
	"time"

	"github.com/plugreg/plugreg/api"
)

// NodeHealthCommand marks every instance of a node suspect, or clears the
// marks it made: the leader proposes it when a node fails in gossip and
// when it is alive again (cluster/health.go). An instance's own checker
// (its agent's probes, or an API registrant) sets Health through its
// registration instead. A new type, for the reason ExpireCommand is one:
// binaries older than it cannot apply it and panic rather than diverge,
// so the leader proposes none while a server of the configuration does
// not say it knows health.
const NodeHealthCommand CommandType = 10

// NodeHealthRequest is a NodeHealthCommand. Suspect true marks the node's
// instances that carry no Health suspect, with Check api.CheckNode, Reason
// and LastSeen; false clears the api.CheckNode marks of the node's
// instances and leaves marks of other checkers alone. It carries no
// request ID: the leader proposes it again on a failure, and a repeat
// changes nothing.
type NodeHealthRequest struct {
	NodeID   string
	Suspect  bool
	Reason   string    `json:",omitempty"`
	LastSeen time.Time // when the node was last known alive
}

func (*NodeHealthRequest) CommandType() CommandType { return NodeHealthCommand }
func (*NodeHealthRequest) ID() string               { return "" }

func (r *NodeHealthRequest) Validate() error {
	if err := api.ValidateIdentifier("NodeID", r.NodeID); err != nil {
		return fmt.Errorf("node health: %w", err)
	}
	if !r.Suspect && (r.Reason != "" || !r.LastSeen.IsZero()) {
		return fmt.Errorf("%w: node health: a clearing request carries no Reason or LastSeen", api.ErrInvalid)
	}
	if err := api.ValidateHealth(r.health()); err != nil {
		return fmt.Errorf("node health %s: %w", r.NodeID, err)
	}
	return nil
}

// health is the mark r puts on each instance (nil when it clears).
func (r *NodeHealthRequest) health() *api.InstanceHealth {
	if !r.Suspect {
		return nil
	}
	return &api.InstanceHealth{Status: api.HealthSuspect, Check: api.CheckNode, Reason: r.Reason, LastSeen: r.LastSeen}
}

// ResultHealth answers a NodeHealthRequest that changed at least one
// instance (ApplyResult.Removed is unused); one that changed none is
// api.ResultUnchanged.
const ResultHealth api.Result = "health"

// nodeHealth applies r: one EventHealth per instance it changed.
func (s *State) nodeHealth(index uint64, r *NodeHealthRequest) (api.Result, []Event) {
	mark := r.health()
	var events []Event
	for _, cur := range s.NodeInstances(r.NodeID) {
		switch {
		case mark != nil && cur.Health != nil:
			continue // already suspect, by whichever checker: its reason stands
		case mark == nil && (cur.Health == nil || cur.Health.Check != api.CheckNode):
			continue // not the node's mark
		}
		list := s.recency(cur.Type, cur.Name)
		p := *cur // the state's instances are shared: a copy changes
		p.Health = mark.Copy()
		p.ModifyIndex = index
		events = append(events, s.replaceAt(index, list, list.seqOf(cur.AllocID), cur, &p))
	}
	if len(events) == 0 {
		return api.ResultUnchanged, nil
	}
	return ResultHealth, events
}
