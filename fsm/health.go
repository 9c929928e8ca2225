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

// NodeHealthBatchCommand is the marks and clearings of many nodes in one
// entry: each NodeHealthRequest of it applies as its own entry would, in
// order. The leader proposes it when many nodes fail or come back at once
// (a rack, a zone, the fleet after a partition): one entry per node
// would make a thousand failed hosts a thousand entries, each waiting
// for the one before. A new type:
// binaries older than it refuse it, so the leader proposes one only
// while every server of the configuration says it knows it (cluster's
// rpcVersionHostSync); before that, one NodeHealthCommand per node.
const NodeHealthBatchCommand CommandType = 15

// MaxNodeHealthBatch bounds the nodes of one NodeHealthBatchCommand: a
// node's marks are an event per instance (20 for a typical host), and
// one entry's events are delivered together.
const MaxNodeHealthBatch = 100

// NodeHealthBatchRequest is a NodeHealthBatchCommand. Like
// NodeHealthRequest it carries no request ID.
type NodeHealthBatchRequest struct {
	Nodes []NodeHealthRequest
}

func (*NodeHealthBatchRequest) CommandType() CommandType { return NodeHealthBatchCommand }
func (*NodeHealthBatchRequest) ID() string               { return "" }

// Validate checks each node's request, and that the batch names each node
// once and holds 1 to MaxNodeHealthBatch of them.
func (r *NodeHealthBatchRequest) Validate() error {
	switch n := len(r.Nodes); {
	case n == 0:
		return fmt.Errorf("%w: node health batch of no node", api.ErrInvalid)
	case n > MaxNodeHealthBatch:
		return fmt.Errorf("%w: node health batch of %d nodes, at most %d", api.ErrTooLarge, n, MaxNodeHealthBatch)
	}
	seen := make(map[string]bool, len(r.Nodes))
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if err := n.Validate(); err != nil {
			return err
		}
		if seen[n.NodeID] {
			return fmt.Errorf("%w: node health batch names node %s twice", api.ErrInvalid, n.NodeID)
		}
		seen[n.NodeID] = true
	}
	return nil
}

// nodeHealthBatch applies r: each node's events in turn. The result is
// ResultHealth if any instance changed, api.ResultUnchanged otherwise.
func (s *State) nodeHealthBatch(index uint64, r *NodeHealthBatchRequest) (api.Result, []Event) {
	var events []Event
	for i := range r.Nodes {
		_, evs := s.nodeHealth(index, &r.Nodes[i])
		events = append(events, evs...)
	}
	if len(events) == 0 {
		return api.ResultUnchanged, nil
	}
	return ResultHealth, events
}
