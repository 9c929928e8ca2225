package fsm

import (
	"bytes"
	"fmt"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/api"
)

// CommandType is the first byte of every log entry plugreg writes. The log
// format is versioned by it from day one: a new command gets a new type, and
// a type with IgnoreUnknownTypeFlag set may be skipped by older binaries
// that do not know it (for commands that only add optional state).
type CommandType uint8

const (
	RegisterCommand       CommandType = 1
	DeregisterCommand     CommandType = 2
	DeregisterNodeCommand CommandType = 3
	// ConditionalDeregisterCommand removes an instance only if it still
	// belongs to a node and/or was last changed at an index. A new type,
	// not new fields on DeregisterCommand: a binary that ignored the
	// condition would delete where newer ones refuse, and diverge.
	// Binaries older than it refuse to apply it (all servers must run a
	// release that knows it before an agent sends one; see
	// docs/operations.md).
	ConditionalDeregisterCommand CommandType = 4

	// IgnoreUnknownTypeFlag marks a command that a binary which does not
	// know its type may skip without diverging (Nomad's fsm.go has the same).
	IgnoreUnknownTypeFlag CommandType = 0x80
)

func (t CommandType) String() string {
	switch t {
	case RegisterCommand:
		return "register"
	case DeregisterCommand:
		return "deregister"
	case DeregisterNodeCommand:
		return "deregister-node"
	case ConditionalDeregisterCommand:
		return "conditional-deregister"
	case ExpireCommand:
		return "expire"
	case NodeHealthCommand:
		return "node-health"
	case ACLBootstrapCommand:
		return "acl-bootstrap"
	case ACLTokenSetCommand:
		return "acl-token-set"
	case ACLTokenDeleteCommand:
		return "acl-token-delete"
	case RestoreCommand:
		return "restore"
	case PaddingCommand:
		return "padding"
	case StateCheckCommand:
		return "state-check"
	case RegisterProtoCommand:
		return "register(protobuf)"
	case DeregisterProtoCommand:
		return "deregister(protobuf)"
	case ConditionalRegisterCommand:
		return "conditional-register"
	case HostSyncCommand:
		return "host-sync"
	case NodeHealthBatchCommand:
		return "node-health-batch"
	}
	return fmt.Sprintf("command(%d)", uint8(t))
}

// Request is a decoded command: one request type per CommandType (the
// switch in DecodeCommand is the list).
type Request interface {
	CommandType() CommandType
	// Validate checks the request as it would be checked at the edge.
	Validate() error
	// ID returns the client's request ID, "" when it sent none.
	ID() string
}

// RegisterRequest adds or updates one plugin instance.
type RegisterRequest struct {
	Plugin    *api.PluginInfo
	RequestID string `json:",omitempty"`
}

// DeregisterRequest removes one plugin instance.
type DeregisterRequest struct {
	Type, Name, AllocID string
	RequestID           string `json:",omitempty"`
}

// ConditionalDeregisterRequest removes one instance if it still belongs to
// IfNodeID (when set) and was last changed at IfModifyIndex (when set);
// otherwise it is refused with ErrConflict and changes nothing.
type ConditionalDeregisterRequest struct {
	Type, Name, AllocID string
	IfNodeID            string `json:",omitempty"`
	IfModifyIndex       uint64 `json:",omitempty"`
	RequestID           string `json:",omitempty"`
}

// DeregisterNodeRequest removes every instance registered with NodeID.
type DeregisterNodeRequest struct {
	NodeID    string
	RequestID string `json:",omitempty"`
}

// NewDeregisterRequest is the command for req: a conditional
// deregistration when req carries a condition, a plain one otherwise (the
// form every release since the first applies).
func NewDeregisterRequest(req api.DeregisterRequest, requestID string) Request {
	if !req.Conditional() {
		return &DeregisterRequest{Type: req.Type, Name: req.Name, AllocID: req.AllocID, RequestID: requestID}
	}
	return &ConditionalDeregisterRequest{
		Type: req.Type, Name: req.Name, AllocID: req.AllocID,
		IfNodeID: req.IfNodeID, IfModifyIndex: req.IfModifyIndex, RequestID: requestID,
	}
}

func (*RegisterRequest) CommandType() CommandType       { return RegisterCommand }
func (*DeregisterRequest) CommandType() CommandType     { return DeregisterCommand }
func (*DeregisterNodeRequest) CommandType() CommandType { return DeregisterNodeCommand }
func (*ConditionalDeregisterRequest) CommandType() CommandType {
	return ConditionalDeregisterCommand
}

func (r *RegisterRequest) ID() string       { return r.RequestID }
func (r *DeregisterRequest) ID() string     { return r.RequestID }
func (r *DeregisterNodeRequest) ID() string { return r.RequestID }
func (r *ConditionalDeregisterRequest) ID() string {
	return r.RequestID
}

func (r *RegisterRequest) Validate() error {
	if err := api.ValidatePlugin(r.Plugin); err != nil {
		return err
	}
	return validateRequestID(r.RequestID)
}

func (r *DeregisterRequest) Validate() error {
	d := api.DeregisterRequest{Type: r.Type, Name: r.Name, AllocID: r.AllocID}
	if err := d.Validate(); err != nil {
		return err
	}
	return validateRequestID(r.RequestID)
}

func (r *ConditionalDeregisterRequest) Validate() error {
	d := api.DeregisterRequest{Type: r.Type, Name: r.Name, AllocID: r.AllocID, IfNodeID: r.IfNodeID, IfModifyIndex: r.IfModifyIndex}
	if err := d.Validate(); err != nil {
		return err
	}
	if !d.Conditional() {
		return fmt.Errorf("%w: conditional deregister without a condition", api.ErrInvalid)
	}
	return validateRequestID(r.RequestID)
}

func (r *DeregisterNodeRequest) Validate() error {
	if err := api.ValidateIdentifier("NodeID", r.NodeID); err != nil {
		return err
	}
	return validateRequestID(r.RequestID)
}

func validateRequestID(id string) error { return api.ValidateRequestID(id) }

// msgpackHandle is read-only configuration shared by every encoder and
// decoder. Canonical sorts map keys so that equal states encode to equal
// bytes; MaxInitLen stops a hostile length prefix from allocating
// gigabytes before the decoder notices the input is short. It is 1 MiB,
// not less: go-msgpack v2 grows a longer byte slice by MaxInitLen at a
// time, copying it each time, so at 4 KiB a restore's 32 MiB of state
// took 38 s to decode, on every node (BenchmarkDecodeRestoreCommand).
var msgpackHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{WriteExt: true}
	h.Canonical = true
	h.MaxInitLen = 1 << 20
	return h
}()

// EncodeCommand validates req and encodes it as a log entry: the type byte,
// then the msgpack body (the protobuf body for a command that has only
// that form, ConditionalRegisterCommand).
func EncodeCommand(req Request) ([]byte, error) {
	if encodingOf(req.CommandType()) == Protobuf {
		return EncodeCommandIn(req, Protobuf)
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", req.CommandType(), err)
	}
	if err := validateNew(req); err != nil {
		return nil, fmt.Errorf("encode %s: %w", req.CommandType(), err)
	}
	var buf bytes.Buffer
	buf.WriteByte(byte(req.CommandType()))
	if err := codec.NewEncoder(&buf, msgpackHandle).Encode(req); err != nil {
		return nil, fmt.Errorf("encode %s: %w", req.CommandType(), err)
	}
	return buf.Bytes(), nil
}

// ReencodeCommand decodes and validates a command that crossed a wire
// (a peer's proposal) and encodes it again: what reaches the log is what
// this binary understood of it, never the peer's bytes. Trailing bytes and
// fields this binary does not know are dropped (a peer could otherwise
// ride megabytes of junk into every server's log with a valid command).
//
// It keeps the entry's encoding: the peer chose protobuf only if every
// server knows it.
func ReencodeCommand(b []byte) ([]byte, error) {
	req, err := DecodeCommand(b)
	if err != nil {
		return nil, err
	}
	return EncodeCommandIn(req, encodingOf(CommandType(b[0])))
}

// DecodeCommand decodes and validates a log entry written by EncodeCommand.
// Unknown fields in the body are ignored (a newer binary may add some);
// an unknown type is ErrUnknownCommand, whatever its flag: the caller
// decides whether it may be skipped (see IgnoreUnknownTypeFlag).
func DecodeCommand(b []byte) (Request, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty entry", api.ErrMalformed)
	}
	t := CommandType(b[0])
	if encodingOf(t) == Protobuf {
		req, err := decodeProto(t, b[1:])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", api.ErrMalformed, t, err)
		}
		if err := req.Validate(); err != nil {
			return nil, fmt.Errorf("decode %s: %w", t, err)
		}
		return req, nil
	}
	var req Request
	switch t {
	case RegisterCommand:
		req = new(RegisterRequest)
	case DeregisterCommand:
		req = new(DeregisterRequest)
	case DeregisterNodeCommand:
		req = new(DeregisterNodeRequest)
	case ConditionalDeregisterCommand:
		req = new(ConditionalDeregisterRequest)
	case ExpireCommand:
		req = new(ExpireRequest)
	case NodeHealthCommand:
		req = new(NodeHealthRequest)
	case NodeHealthBatchCommand:
		req = new(NodeHealthBatchRequest)
	case ACLBootstrapCommand:
		req = new(ACLBootstrapRequest)
	case ACLTokenSetCommand:
		req = new(ACLTokenSetRequest)
	case ACLTokenDeleteCommand:
		req = new(ACLTokenDeleteRequest)
	case RestoreCommand:
		req = new(RestoreRequest)
	case PaddingCommand:
		req = new(PaddingRequest)
	case StateCheckCommand:
		req = new(StateCheckRequest)
	default:
		return nil, fmt.Errorf("%w: %d", api.ErrUnknownCommand, uint8(t))
	}
	dec := codec.NewDecoderBytes(b[1:], msgpackHandle)
	if err := dec.Decode(req); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", api.ErrMalformed, t, err)
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("decode %s: %w", t, err)
	}
	return req, nil
}
