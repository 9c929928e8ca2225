package fsm

import (
	"fmt"

	"github.com/plugreg/plugreg/api"
)

// ConditionalRegisterCommand registers or updates an instance only if no
// instance with its key exists or the existing one belongs to IfNodeID:
// what a caller bound to a node (an agent token) writes, so that it can
// replace, move the lease of, or change the health of only the instances
// its node owns, checked where the entry is applied, against the instance
// as it is then (a check at the edge would race a registration from
// another node). A new type, for the reason ConditionalDeregisterCommand
// is one: a binary that ignored the condition would replace where newer
// ones refuse, and diverge; binaries older than it refuse to apply it, so
// a server proposes one only while every server of the configuration says
// it knows it (cluster's rpcVersionConditionalRegister).
//
// It has only a protobuf form (see protocommand.go): every release that
// knows it knows protobuf entries, and the registrations of node-bound
// callers are most of a secure cluster's writes.
//
//	message ConditionalRegisterEntry {
//	  pluginpb.PluginInfo plugin = 1;
//	  string request_id = 2;
//	  string if_node_id = 3;
//	}
const ConditionalRegisterCommand CommandType = 13

// ConditionalRegisterRequest is a ConditionalRegisterCommand. A refused
// condition is ErrConflict and changes nothing, and, as a refused
// conditional deregister, records no request ID: a retry is checked
// again.
type ConditionalRegisterRequest struct {
	Plugin    *api.PluginInfo
	IfNodeID  string
	RequestID string `json:",omitempty"`
}

func (*ConditionalRegisterRequest) CommandType() CommandType { return ConditionalRegisterCommand }
func (r *ConditionalRegisterRequest) ID() string             { return r.RequestID }

func (r *ConditionalRegisterRequest) Validate() error {
	if err := api.ValidatePlugin(r.Plugin); err != nil {
		return err
	}
	if r.IfNodeID == "" {
		return fmt.Errorf("%w: conditional register without a condition", api.ErrInvalid)
	}
	if err := api.ValidateIdentifier("IfNodeID", r.IfNodeID); err != nil {
		return err
	}
	return validateRequestID(r.RequestID)
}

// NewRegisterRequest is the command registering p: conditional on the
// instance it replaces belonging to ifNodeID when that is set, a plain
// registration (the form every release applies) otherwise.
func NewRegisterRequest(p *api.PluginInfo, requestID, ifNodeID string) Request {
	if ifNodeID == "" {
		return &RegisterRequest{Plugin: p, RequestID: requestID}
	}
	return &ConditionalRegisterRequest{Plugin: p, IfNodeID: ifNodeID, RequestID: requestID}
}

// CheckOwner refuses, with ErrConflict, a registration of p by a caller
// bound to ifNodeID while an instance with p's key belongs to another
// node. An absent instance passes: registering it is no take-over.
func (s *State) CheckOwner(p *api.PluginInfo, ifNodeID string) error {
	cur := s.Instance(p.Type, p.Name, p.AllocID)
	if cur == nil || cur.NodeID == ifNodeID {
		return nil
	}
	// Not naming the instance: every caller's error does already.
	return fmt.Errorf("%w: the instance belongs to node %q, not %q", api.ErrConflict, cur.NodeID, ifNodeID)
}
