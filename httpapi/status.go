package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/authz"
)

// The cluster's status as an agent sees it: the leader, the peers, the
// gossip members, health (with the required plugin types), and the
// operator calls that change the Raft configuration.

func (s *Server) leader(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.be.Leader())
}

func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	peers, err := s.be.Peers(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if peers == nil {
		peers = []string{}
	}
	writeJSON(w, http.StatusOK, peers)
}

func (s *Server) members(w http.ResponseWriter, r *http.Request) {
	if err := authz.ReadCluster(r.Context()); err != nil {
		writeError(w, err) // the guard answers an empty list; the route says why
		return
	}
	writeJSON(w, http.StatusOK, s.be.Members(r.Context()))
}

// health answers GET /v1/health: readiness (200 when the agent can serve
// reads and writes now: a server that knows a leader and has applied what
// it knows committed, a client agent that reaches a server; 503
// otherwise; ?ready says so explicitly), or with ?live liveness (200
// whenever the process serves HTTP), for supervisors that must not
// restart an agent that merely waits for a leader. An agent with
// RequiredTypes is also not ready while its node lacks one of them.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	h := s.be.Health()
	if h.Status == "ok" && len(s.cfg.RequiredTypes) > 0 {
		s.checkRequiredTypes(r.Context(), &h)
	}
	if r.URL.Query().Has("live") {
		writeJSON(w, http.StatusOK, h)
		return
	}
	status := http.StatusOK
	if h.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

// checkRequiredTypes sets h's status to missing_required_types (naming
// them in MissingTypes) while this node has no instance of one of
// RequiredTypes (a suspect instance does not count). It reads the node's instances from the answering
// server's state (stale: a health check must not wait on the leader, and
// an agent that reaches no server is already not ready); a failed read
// is reported as such, not as ready.
func (s *Server) checkRequiredTypes(ctx context.Context, h *api.Health) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	// The agent's own check, not the caller's read: health is open.
	res, err := s.cfg.Backend.Query(ctx, api.Query{Kind: api.QueryNode, NodeID: s.cfg.Backend.NodeID(), Consistency: api.Stale})
	if err != nil {
		h.Status, h.Reason = "required_types_unknown", fmt.Sprintf("reading this node's plugins: %v", err)
		return
	}
	has := map[string]bool{}
	for _, p := range res.Plugins {
		// A suspect instance covers nothing, here as in coverage.
		has[p.Type] = has[p.Type] || !p.Suspect()
	}
	for _, t := range s.cfg.RequiredTypes {
		if !has[t] {
			h.MissingTypes = append(h.MissingTypes, t)
		}
	}
	if len(h.MissingTypes) > 0 {
		h.Status = "missing_required_types"
		h.Reason = fmt.Sprintf("node %s has no instance of the required plugin types %s", h.Node, strings.Join(h.MissingTypes, ", "))
	}
}

func (s *Server) leave(w http.ResponseWriter, r *http.Request) {
	if s.cfg.OnLeave == nil {
		writeError(w, fmt.Errorf("%w: this agent cannot be asked to leave over HTTP", api.ErrUnsupported))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Node": s.be.NodeID(), "Status": "leaving"})
	s.leaveOnce.Do(func() { go s.cfg.OnLeave() })
}

func (s *Server) transfer(w http.ResponseWriter, r *http.Request) {
	leader, err := s.be.TransferLeadership(r.Context())
	if err != nil {
		writeOperatorError(w, err, "transfer_failed")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Leader": leader})
}

func (s *Server) removePeer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := api.ValidateIdentifier("id", id); err != nil {
		writeError(w, err)
		return
	}
	if err := s.be.RemovePeer(r.Context(), id); err != nil {
		writeOperatorError(w, err, "remove_failed")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"Removed": id})
}
