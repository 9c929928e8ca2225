package api

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid marks a request that fails validation. It is wrapped with
	// the field at fault; test with errors.Is.
	ErrInvalid = errors.New("plugreg: invalid request")

	// ErrTooLarge marks a request over one of the size limits.
	ErrTooLarge = errors.New("plugreg: request too large")

	// ErrNotFound marks a lookup of a type, name or instance that does not
	// exist.
	ErrNotFound = errors.New("plugreg: not found")

	// ErrConflict marks a conditional write whose condition did not hold
	// when it was applied (the instance belongs to another node, or was
	// changed since the index the caller named). Nothing changed.
	ErrConflict = errors.New("plugreg: condition not met")

	// ErrUnknownCommand marks a write the leader's binary does not know (a
	// rolling upgrade in progress). Nothing was applied.
	ErrUnknownCommand = errors.New("plugreg: unknown command type; upgrade the servers")

	// ErrMalformed marks bytes that do not decode as a command.
	ErrMalformed = errors.New("plugreg: malformed command")

	// ErrUnsupported marks a call the answering agent cannot serve (an
	// operator call to a client agent: ask a server).
	ErrUnsupported = errors.New("plugreg: not supported by this agent; ask a server")

	// ErrTooManyRequests: one of the agent's limits is reached (see
	// CodeTooManyRequests); nothing was done.
	ErrTooManyRequests = errors.New("plugreg: too many requests")
)

// Outcome says what a failed write did to the log.
type Outcome string

const (
	// NotApplied: the write definitely did not and will not apply. Retrying
	// it is safe even without a request ID.
	NotApplied Outcome = "not_applied"
	// OutcomeUnknown: the write may have applied or may still apply. Retry
	// it only with the same request ID.
	OutcomeUnknown Outcome = "unknown"
)

// Error codes, stable across the wire and in the HTTP API.
const (
	// Refusals: the request was wrong, and will be wrong again.
	CodeInvalid        = "invalid"
	CodeTooLarge       = "too_large"
	CodeNotFound       = "not_found"
	CodeConflict       = "conflict"
	CodeMalformed      = "malformed"
	CodeUnknownCommand = "unknown_command" // not applied
	CodeUnsupported    = "unsupported"

	// Availability: try again, here or elsewhere.
	CodeNoLeader       = "no_leader"        // not applied
	CodeEnqueueTimeout = "enqueue_timeout"  // not applied
	CodeNotLeader      = "not_leader"       // not applied
	CodeNotReady       = "leader_not_ready" // reads: the new leader has not committed in its term yet
	CodeStarting       = "not_ready"        // not applied: the node is starting and cannot answer RPC yet
	CodeNoServer       = "no_server"        // not applied: a client agent knows no live server
	CodeLeadershipLost = "leadership_lost"  // unknown
	CodeShutdown       = "shutdown"         // unknown
	CodeForwardFailed  = "forward_failed"   // unknown
	CodeTimeout        = "timeout"          // unknown
	// CodeTooManyRequests: an agent's limit (connections, streams,
	// blocking queries) is reached; nothing was done. HTTP 429 with
	// Retry-After.
	CodeTooManyRequests = "too_many_requests" // not applied
	CodeInternal        = "internal"
)

// CodeOutcome is what an availability error with code means for a write.
func CodeOutcome(code string) Outcome {
	switch code {
	case CodeNoLeader, CodeEnqueueTimeout, CodeNotLeader, CodeNotReady, CodeStarting, CodeNoServer,
		CodeUnknownCommand, CodeInvalid, CodeTooLarge, CodeNotFound, CodeConflict, CodeMalformed, CodeUnsupported,
		CodePermissionDenied, CodeACLNotFound, CodeACLBootstrapped, CodeTooManyRequests:
		return NotApplied
	}
	return OutcomeUnknown
}

// Coded is an error with a stable code and what it means for a write.
// Availability errors implement it; the HTTP API answers them with 503.
type Coded interface {
	error
	Code() string
	Outcome() Outcome
}

// Error is a Coded error: an availability failure, possibly received from
// another node.
type Error struct {
	code    string
	outcome Outcome
	err     error
}

// NewError returns an availability error with code; its outcome is
// CodeOutcome(code).
func NewError(code string, err error) *Error {
	return &Error{code: code, outcome: CodeOutcome(code), err: err}
}

// NewErrorOutcome returns an error with an explicit outcome.
func NewErrorOutcome(code string, outcome Outcome, err error) *Error {
	return &Error{code: code, outcome: outcome, err: err}
}

func (e *Error) Error() string    { return fmt.Sprintf("%s: %v", e.code, e.err) }
func (e *Error) Unwrap() error    { return e.err }
func (e *Error) Code() string     { return e.code }
func (e *Error) Outcome() Outcome { return e.outcome }

// refusals are the sentinels that carry a deterministic refusal across the
// wire by code, so errors.Is works on both sides (Consul does the same with
// structs.ErrNoLeader).
var refusals = []struct {
	code string
	err  error
}{
	{CodeInvalid, ErrInvalid},
	{CodeTooLarge, ErrTooLarge},
	{CodeNotFound, ErrNotFound},
	{CodeConflict, ErrConflict},
	{CodeMalformed, ErrMalformed},
	{CodeUnknownCommand, ErrUnknownCommand},
	{CodeUnsupported, ErrUnsupported},
	{CodePermissionDenied, ErrPermissionDenied},
	{CodeACLNotFound, ErrACLNotFound},
	{CodeACLBootstrapped, ErrACLBootstrapped},
	{CodeTooManyRequests, ErrTooManyRequests},
}

// RefusalCode names err's refusal sentinel ("" when it has none).
func RefusalCode(err error) string {
	for _, r := range refusals {
		if errors.Is(err, r.err) {
			return r.code
		}
	}
	return ""
}

// ErrorCode is the code of any error this package can classify: a refusal
// sentinel's, a Coded error's, or "".
func ErrorCode(err error) string {
	if c := RefusalCode(err); c != "" {
		return c
	}
	var coded Coded
	if errors.As(err, &coded) {
		return coded.Code()
	}
	return ""
}

// FromWire rebuilds an error received from another node as code and msg:
// a refusal wraps its sentinel, anything else is an *Error with the
// code's outcome. msg is kept as the peer wrote it.
func FromWire(code, msg string) error {
	for _, r := range refusals {
		if r.code == code {
			return &remoteRefusal{msg: msg, sentinel: r.err}
		}
	}
	return NewError(code, errors.New(msg))
}

// remoteRefusal is a refusal received from another node: its message as
// the peer wrote it, its identity from the code.
type remoteRefusal struct {
	msg      string
	sentinel error
}

func (e *remoteRefusal) Error() string { return e.msg }
func (e *remoteRefusal) Unwrap() error { return e.sentinel }
