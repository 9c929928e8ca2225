package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/gossip"
)

// The leader's side of instance health (api.InstanceHealth): the instances
// of a node that is not alive in gossip are suspect until the node is
// alive again or reaped. The leader marks them when the node fails or
// leaves, and clears its marks when the node is alive again, the nodes of
// one reconcile together (a NodeHealthBatchCommand per
// fsm.MaxNodeHealthBatch of them); the node's own agent clears them too when it next
// re-asserts its registrations. The other checker, an agent's probes of
// its plugins, writes through the instance's registration.

// rpcVersionHealth is the RPCVersion (gossip.Meta) of servers that apply
// NodeHealthCommand and registrations with Health. Neither is proposed
// while a server of the configuration does not say so.
const rpcVersionHealth = 3

// nodeMarks are the nodes whose instances this leader's term holds marked
// suspect (api.CheckNode). Only the leader loop touches it.
type nodeMarks map[string]bool

// nodeMarksOf reads the marks a term starts with from the state: a new
// leader clears what its predecessor marked once the node is alive.
func nodeMarksOf(st *fsm.State) nodeMarks {
	marks := nodeMarks{}
	st.Walk(func(_, _ string, list []*api.PluginInfo) bool {
		for _, p := range list {
			if p.Health != nil && p.Health.Check == api.CheckNode {
				marks[p.NodeID] = true
			}
		}
		return true
	})
	return marks
}

// markNodes proposes a mark for each node with instances that is not
// alive and not marked yet, and a clearing for each marked node alive
// again. A proposal that fails is made again at the next reconcile.
func (s *Server) markNodes(stop <-chan struct{}, members []gossip.Member, marks nodeMarks) {
	st := s.fsm.State()
	var todo []*fsm.NodeHealthRequest
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		seen[m.Name] = true
		switch alive := m.Status == gossip.StatusAlive; {
		case !alive && !marks[m.Name] && st.HasNodeInstances(m.Name):
			todo = append(todo, &fsm.NodeHealthRequest{NodeID: m.Name, Suspect: true,
				Reason: fmt.Sprintf("node %s in gossip since %s", m.Status, m.Since.UTC().Format("2006-01-02T15:04:05Z")), LastSeen: m.Since.UTC()})
		case alive && marks[m.Name]:
			todo = append(todo, &fsm.NodeHealthRequest{NodeID: m.Name})
		}
	}
	for node := range marks {
		if !seen[node] && !st.HasNodeInstances(node) {
			delete(marks, node) // gone from gossip and reaped
		}
	}
	if len(todo) == 0 {
		return
	}
	if old := s.serverBelow(rpcVersionHealth); old != "" {
		s.logger.Debug("not marking node health: a server does not know it yet", "server", old)
		return
	}
	// Many nodes at once (a rack, the fleet after a partition) are an
	// entry per MaxNodeHealthBatch of them, not one per node each
	// waiting for the one before; while a server does not apply
	// batches, one per node.
	size := 1
	if s.serverBelow(rpcVersionHostSync) == "" {
		size = fsm.MaxNodeHealthBatch
	}
	for chunk := range slices.Chunk(todo, size) {
		select {
		case <-stop:
			return
		default:
		}
		s.writeNodeHealth(chunk, marks)
	}
}

// writeNodeHealth writes the marks and clearings of reqs in one entry
// (one NodeHealthCommand for one node, a NodeHealthBatchCommand for
// more) and records them in marks once written.
func (s *Server) writeNodeHealth(reqs []*fsm.NodeHealthRequest, marks nodeMarks) {
	var req fsm.Request = reqs[0]
	if len(reqs) > 1 {
		b := &fsm.NodeHealthBatchRequest{Nodes: make([]fsm.NodeHealthRequest, len(reqs))}
		for i, r := range reqs {
			b.Nodes[i] = *r
		}
		req = b
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	res, err := s.write(ctx, req)
	cancel()
	for _, r := range reqs {
		switch {
		case err != nil:
			s.logger.Warn("node health not written; will retry", "node", r.NodeID, "suspect", r.Suspect, "error", err)
		case r.Suspect:
			marks[r.NodeID] = true
			s.logger.Info("instances of a node not alive in gossip marked suspect", "node", r.NodeID, "reason", r.Reason, "index", res.Index)
		default:
			delete(marks, r.NodeID)
			s.logger.Info("node alive again: suspect marks cleared", "node", r.NodeID, "index", res.Index)
		}
	}
}
