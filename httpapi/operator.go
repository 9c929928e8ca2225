package httpapi

import (
	"net/http"
	"runtime"
	"strconv"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/internal/buildinfo"
)

// RaftStatser is a Backend with Raft figures of its own (a server).
type RaftStatser interface {
	Stats() map[string]string
}

// autopilotHealth answers GET /v1/operator/autopilot/health: 200 when
// every server is healthy, 429 otherwise (Consul's codes: a load
// balancer or a script reads the status alone).
func (s *Server) autopilotHealth(w http.ResponseWriter, r *http.Request) {
	h, err := s.be.AutopilotHealth(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if !h.Healthy {
		status = http.StatusTooManyRequests
	}
	writeJSON(w, status, h)
}

// resumeReaping answers POST /v1/operator/reap/resume: the leader reaps
// the failed nodes its guard holds, until the guard releases; the answer
// is the guard's state. Another server answers 503 not_leader.
func (s *Server) resumeReaping(w http.ResponseWriter, r *http.Request) {
	st, err := s.be.ResumeReaping(r.Context())
	if err != nil {
		writeOperatorError(w, err, "resume_failed")
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// agentSelf answers GET /v1/agent/self.
func (s *Server) agentSelf(w http.ResponseWriter, r *http.Request) {
	self := api.AgentSelf{
		Config: api.AgentConfig{NodeID: s.be.NodeID(), Role: s.be.Role(), ACLEnabled: s.cfg.ACL.Enabled, ACLDefaultDeny: s.cfg.ACL.DefaultDeny,
			GossipEncrypted: s.cfg.Keyring != nil, TLS: r.TLS != nil},
		Health: s.be.Health(),
		Stats:  map[string]map[string]string{},
	}
	bi := buildinfo.Read()
	self.Config.Version, self.Config.Revision = bi.Version, bi.Revision
	for _, m := range s.be.Members(r.Context()) {
		if m.Name == s.be.NodeID() {
			m := m
			self.Member = &m
		}
	}
	if rs, ok := s.cfg.Backend.(RaftStatser); ok {
		self.Stats["raft"] = rs.Stats()
	}
	self.Stats["runtime"] = map[string]string{
		"goroutines": strconv.Itoa(runtime.NumGoroutine()), "version": runtime.Version(),
		"arch": runtime.GOARCH, "os": runtime.GOOS, "cpu_count": strconv.Itoa(runtime.NumCPU()),
	}
	writeJSON(w, http.StatusOK, self)
}
