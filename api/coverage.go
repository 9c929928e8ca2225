package api

import (
	"fmt"
	"slices"
)

// Coverage answers GET /v1/coverage/{type}: which live nodes run an
// instance of Type and which lack one (docs/api.md, "Coverage").
//
// A node is live when the answering agent's gossip has it alive (a member
// declared failed, or that left, is not). Covered, Missing and the live
// part of Suspect split the live nodes (Nodes is their sum), so the
// counts add up the way Nomad's healthy/expected counts did not:
//
//   - Covered: live nodes with at least one instance of Type that is not
//     suspect;
//   - Missing: live nodes with no instance of Type;
//   - Suspect: nodes with instances of Type that cannot be trusted: the
//     node failed in gossip but its instances are still registered (not
//     reaped yet, -node-reap-after), or every instance it has is suspect;
//   - Orphaned: nodes with instances of Type that are no member at all,
//     or left the pool (registrations made through the API for hosts
//     that run no agent); never counted as covered.
//
// Node names are sorted.
type Coverage struct {
	Type     string
	Role     string `json:",omitempty"` // the ?role filter, if any
	Nodes    int    // live nodes considered
	Covered  []string
	Missing  []string
	Suspect  []string
	Orphaned []string
	// OrphanedInstances counts the instances on Orphaned nodes and those
	// registered with no NodeID.
	OrphanedInstances int
}

// CoverageStates are the states a live or suspect node can be in, in the
// order the CLI and the gauge (plugreg_coverage_nodes) show them.
var CoverageStates = []string{"covered", "missing", "suspect"}

// Count returns how many nodes are in state (one of CoverageStates).
func (c *Coverage) Count(state string) int {
	switch state {
	case "covered":
		return len(c.Covered)
	case "missing":
		return len(c.Missing)
	case "suspect":
		return len(c.Suspect)
	}
	return 0
}

// ValidateCoverageRole checks a coverage query's role filter: empty (every
// member), RoleClient or RoleServer.
func ValidateCoverageRole(role string) error {
	switch role {
	case "", RoleClient, RoleServer:
		return nil
	}
	return fmt.Errorf("%w: role %q: want %s or %s", ErrInvalid, role, RoleClient, RoleServer)
}

// NewCoverage computes the coverage of typ from a gossip view (members)
// and every instance of typ (api.QueryTypeInstances).
// role, when set, keeps only the members of that role; an instance on a
// member of the other role is then left out, not orphaned.
func NewCoverage(typ, role string, members []Member, plugins []*PluginInfo) Coverage {
	c := Coverage{Type: typ, Role: role, Covered: []string{}, Missing: []string{}, Suspect: []string{}, Orphaned: []string{}}
	status := make(map[string]Member, len(members))
	for _, m := range members {
		status[m.Name] = m
	}
	// healthy: the node has an instance that is not suspect.
	healthy := map[string]bool{}
	for _, p := range plugins {
		if p.Type != typ {
			continue
		}
		if p.NodeID == "" {
			c.OrphanedInstances++
			continue
		}
		h, seen := healthy[p.NodeID]
		healthy[p.NodeID] = h || !p.Suspect()
		if m, ok := status[p.NodeID]; !ok || m.Status == "left" {
			c.OrphanedInstances++
			if !seen {
				c.Orphaned = append(c.Orphaned, p.NodeID)
			}
		}
	}
	for _, m := range members {
		if role != "" && m.Role != role {
			continue
		}
		h, has := healthy[m.Name]
		switch {
		case m.Status == "alive" && !has:
			c.Nodes++
			c.Missing = append(c.Missing, m.Name)
		case m.Status == "alive" && h:
			c.Nodes++
			c.Covered = append(c.Covered, m.Name)
		case m.Status == "alive":
			c.Nodes++
			c.Suspect = append(c.Suspect, m.Name)
		case m.Status == "failed" && has:
			c.Suspect = append(c.Suspect, m.Name)
		}
	}
	for _, l := range [][]string{c.Covered, c.Missing, c.Suspect, c.Orphaned} {
		slices.Sort(l)
	}
	return c
}
