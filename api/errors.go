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
	// CodeHostNotAllowed: a plain-HTTP request named a Host that is not
	// one of the agent's (HTTP 421; -http-allowed-hosts): what a web page
	// whose DNS name was rebound to the agent sends.
	CodeHostNotAllowed = "host_not_allowed" // not applied

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

// WireStatus is what transport sends of an error: its code and outcome.
func (e *Error) WireStatus() (code, outcome string) { return e.code, string(e.outcome) }

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

// WireError is an error as it crosses between nodes (the internal RPC's
// status, a stream's end, one reply of a forwarded batch): its code, what
// it did to a write, and its message. ToWire makes one, Err rebuilds the
// error on the other side; every wire of plugreg uses this pair.
type WireError struct {
	Code    string
	Outcome Outcome // "" from a peer of a release without outcomes: then the code's
	Msg     string
}

// ToWire returns err in its wire form (nil for nil): its code (CodeInternal
// when it has none), its outcome (a Coded error's own, else the code's),
// its message. A *WireError is what transport encodes as a status.
func ToWire(err error) error {
	if err == nil {
		return nil
	}
	var w *WireError
	if errors.As(err, &w) {
		return w
	}
	w = &WireError{Code: ErrorCode(err), Msg: err.Error()}
	if e, ok := err.(*Error); ok {
		// Err puts the code in front again: a message must not grow
		// by one "code: " at every hop.
		w.Msg = e.err.Error()
	}
	if w.Code == "" {
		w.Code = CodeInternal
	}
	var coded Coded
	if RefusalCode(err) == "" && errors.As(err, &coded) {
		w.Outcome = coded.Outcome()
	} else {
		w.Outcome = CodeOutcome(w.Code)
	}
	return w
}

func (w *WireError) Error() string { return w.Msg }

// WireStatus is what transport sends of an error: its code and outcome.
func (w *WireError) WireStatus() (code, outcome string) { return w.Code, string(w.Outcome) }

// Err rebuilds the error a peer sent: a refusal wraps its sentinel (so
// errors.Is works across the wire), anything else is an *Error with the
// outcome sent, or the code's when the peer sent none. Msg is kept as the
// peer wrote it.
func (w *WireError) Err() error {
	for _, r := range refusals {
		if r.code == w.Code {
			return &remoteRefusal{msg: w.Msg, sentinel: r.err}
		}
	}
	outcome := w.Outcome
	if outcome == "" {
		outcome = CodeOutcome(w.Code)
	}
	return NewErrorOutcome(w.Code, outcome, errors.New(w.Msg))
}

// remoteRefusal is a refusal received from another node: its message as
// the peer wrote it, its identity from the code.
type remoteRefusal struct {
	msg      string
	sentinel error
}

func (e *remoteRefusal) Error() string { return e.msg }
func (e *remoteRefusal) Unwrap() error { return e.sentinel }
