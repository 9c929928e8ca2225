package httpapi

import (
	"fmt"
	"io"
	"net/http"

	"github.com/plugreg/plugreg/api"
)

// Keyring is an agent's gossip encryption keyring (gossip.Keyring). Its
// operations are this agent's alone: the CLI's keyring command calls
// every member in turn, as Consul's keyring operations reach every agent.
type Keyring interface {
	Status() api.KeyringStatus
	Install(key string) error
	Use(key string) error
	Remove(key string) error
}

// maxKeyringBody bounds a keyring request: a base64 key in JSON.
const maxKeyringBody = 4 << 10

// keyring serves /v1/agent/keyring: GET lists, POST installs, PUT uses,
// DELETE removes (Consul's methods for /v1/operator/keyring). Operator
// only: the keys let whoever holds them into the gossip pool.
func (s *Server) keyring(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Keyring == nil {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "gossip encryption is not enabled on this agent (-encrypt)", Code: "gossip_not_encrypted"})
		return
	}
	if r.Method == http.MethodGet {
		st := s.cfg.Keyring.Status()
		st.Node = s.be.NodeID()
		writeJSON(w, http.StatusOK, st)
		return
	}
	key, err := decodeKeyringRequest(r.Body) // bounded by its route's access
	if err != nil {
		writeError(w, err)
		return
	}
	var op func(string) error
	switch r.Method {
	case http.MethodPost:
		op = s.cfg.Keyring.Install
	case http.MethodPut:
		op = s.cfg.Keyring.Use
	case http.MethodDelete:
		op = s.cfg.Keyring.Remove
	}
	if err := op(key); err != nil {
		writeError(w, err)
		return
	}
	st := s.cfg.Keyring.Status()
	st.Node = s.be.NodeID()
	writeJSON(w, http.StatusOK, st)
}

// decodeKeyringRequest decodes {"Key": "..."}; the key's form is checked
// by the keyring, whose errors never quote it.
func decodeKeyringRequest(body io.Reader) (string, error) {
	var req api.KeyringRequest
	if err := decodeJSON(body, &req); err != nil {
		return "", err
	}
	if req.Key == "" {
		return "", fmt.Errorf("%w: Key is required", api.ErrInvalid)
	}
	return req.Key, nil
}
