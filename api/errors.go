package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// Error codes, stable across the wire and in the HTTP API. The error table
// (errorTable) gives each its sentinel, outcome and HTTP status.
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

// CodeMethodNotAllowed: the HTTP route exists with other methods (HTTP
// 405, with Allow); nothing was done.
const CodeMethodNotAllowed = "method_not_allowed"

// An ErrorKind is one row of the error table: what plugreg says of one
// error code at every edge. The HTTP API answers with Status, Code and
// Outcome; a node sends Code and Outcome (WireError); the receiving side,
// a node or the Go client, rebuilds Sentinel from Code.
type ErrorKind struct {
	Code string
	// Sentinel is the refusal errors.Is finds on both sides of a wire;
	// nil for the availability codes, which cross as an *Error.
	Sentinel error
	// Outcome is what an error of this kind did to a write; an *Error
	// may carry another (a timeout before the entry was proposed is
	// not applied).
	Outcome Outcome
	// Status is the HTTP status of an error of this kind.
	Status int
}

// errorTable is the one table of error kinds. Lookups by error take the
// first row whose sentinel matches: a sentinel that wraps another
// (ErrACLNotFound wraps ErrPermissionDenied) comes before it, and an error
// that wraps two is the earlier's (a limit before a size before validity).
var errorTable = []ErrorKind{
	// Refusals: the request was wrong, and will be wrong again.
	{CodeTooManyRequests, ErrTooManyRequests, NotApplied, http.StatusTooManyRequests},
	{CodeTooLarge, ErrTooLarge, NotApplied, http.StatusRequestEntityTooLarge},
	{CodeInvalid, ErrInvalid, NotApplied, http.StatusBadRequest},
	{CodeMalformed, ErrMalformed, NotApplied, http.StatusBadRequest},
	{CodeACLNotFound, ErrACLNotFound, NotApplied, http.StatusForbidden},
	{CodePermissionDenied, ErrPermissionDenied, NotApplied, http.StatusForbidden},
	{CodeACLBootstrapped, ErrACLBootstrapped, NotApplied, http.StatusConflict},
	{CodeNotFound, ErrNotFound, NotApplied, http.StatusNotFound},
	{CodeConflict, ErrConflict, NotApplied, http.StatusConflict},
	{CodeUnsupported, ErrUnsupported, NotApplied, http.StatusNotImplemented},
	// Version skew: retry once the servers are upgraded.
	{CodeUnknownCommand, ErrUnknownCommand, NotApplied, http.StatusServiceUnavailable},
	// Refusals of the HTTP edge alone.
	{CodeHostNotAllowed, nil, NotApplied, http.StatusMisdirectedRequest},
	{CodeMethodNotAllowed, nil, NotApplied, http.StatusMethodNotAllowed},
	// Availability, nothing done: retry anywhere.
	{CodeNoLeader, nil, NotApplied, http.StatusServiceUnavailable},
	{CodeEnqueueTimeout, nil, NotApplied, http.StatusServiceUnavailable},
	{CodeNotLeader, nil, NotApplied, http.StatusServiceUnavailable},
	{CodeNotReady, nil, NotApplied, http.StatusServiceUnavailable},
	{CodeStarting, nil, NotApplied, http.StatusServiceUnavailable},
	{CodeNoServer, nil, NotApplied, http.StatusServiceUnavailable},
	// Availability, outcome unknown: retry with the same request ID.
	{CodeLeadershipLost, nil, OutcomeUnknown, http.StatusServiceUnavailable},
	{CodeShutdown, nil, OutcomeUnknown, http.StatusServiceUnavailable},
	{CodeForwardFailed, nil, OutcomeUnknown, http.StatusServiceUnavailable},
	{CodeTimeout, nil, OutcomeUnknown, http.StatusServiceUnavailable},
	{CodeInternal, nil, OutcomeUnknown, http.StatusInternalServerError},
}

// ErrorKinds returns the error table, one row per code.
func ErrorKinds() []ErrorKind { return append([]ErrorKind(nil), errorTable...) }

// KindOfCode returns the row of code. A code this binary does not know
// (a newer peer's) is an availability error of unknown outcome: HTTP 503.
func KindOfCode(code string) ErrorKind {
	for _, k := range errorTable {
		if k.Code == code {
			return k
		}
	}
	return ErrorKind{Code: code, Outcome: OutcomeUnknown, Status: http.StatusServiceUnavailable}
}

// KindOf classifies err by the table: the row of its refusal sentinel, of
// a Coded error's code (with the error's own outcome), of CodeTimeout for
// a context's end, else CodeInternal's.
func KindOf(err error) ErrorKind {
	if k, ok := kindOf(err); ok {
		return k
	}
	return KindOfCode(CodeInternal)
}

// kindOf is KindOf, and false for an error the table does not classify.
func kindOf(err error) (ErrorKind, bool) {
	if k, ok := refusalKind(err); ok {
		return k, true
	}
	var w *WireError
	var coded Coded
	switch {
	case errors.As(err, &w):
		return withOutcome(KindOfCode(w.Code), w.Outcome), true
	case errors.As(err, &coded):
		return withOutcome(KindOfCode(coded.Code()), coded.Outcome()), true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return KindOfCode(CodeTimeout), true
	}
	return ErrorKind{}, false
}

// withOutcome is k with outcome o, when one was given.
func withOutcome(k ErrorKind, o Outcome) ErrorKind {
	if o != "" {
		k.Outcome = o
	}
	return k
}

// refusalKind is the row of err's refusal sentinel.
func refusalKind(err error) (ErrorKind, bool) {
	for _, k := range errorTable {
		if k.Sentinel != nil && errors.Is(err, k.Sentinel) {
			return k, true
		}
	}
	return ErrorKind{}, false
}

// CodeOutcome is what an error with code means for a write.
func CodeOutcome(code string) Outcome { return KindOfCode(code).Outcome }

// Coded is an error with a stable code and what it means for a write.
// Availability errors implement it; the HTTP API answers them with their
// row's status (503 for a code not in the table).
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

// RefusalCode names err's refusal sentinel ("" when it has none).
func RefusalCode(err error) string {
	k, _ := refusalKind(err)
	return k.Code
}

// ErrorCode is the code of any error the table classifies: a refusal
// sentinel's, a Coded error's, CodeTimeout for a context's end, or "".
func ErrorCode(err error) string {
	k, _ := kindOf(err)
	return k.Code
}

// WireError is an error as it crosses between nodes (the internal RPC's
// status, a stream's end, one reply of a forwarded batch): its code, what
// it did to a write, and its message. ToWire makes one, Err rebuilds the
// error on the other side; every wire of plugreg uses this pair.
//
// Its msgpack form is the fields by name, each omitted when empty: the
// transport's status and a stream's end carry it inline under the names
// they always had (Code, Outcome, Msg).
type WireError struct {
	Code    string  `codec:",omitempty"`
	Outcome Outcome `codec:",omitempty"` // "" from a peer of a release without outcomes: then the code's
	Msg     string  `codec:",omitempty"`
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
	k := KindOf(err)
	w = &WireError{Code: k.Code, Outcome: k.Outcome, Msg: err.Error()}
	if e, ok := err.(*Error); ok {
		// Err puts the code in front again: a message must not grow
		// by one "code: " at every hop.
		w.Msg = e.err.Error()
	}
	return w
}

func (w *WireError) Error() string { return w.Msg }

// Err rebuilds the error a peer sent: a refusal wraps its sentinel (so
// errors.Is works across the wire), anything else is an *Error with the
// outcome sent, or the code's when the peer sent none. Msg is kept as the
// peer wrote it.
func (w *WireError) Err() error {
	k := KindOfCode(w.Code)
	if k.Sentinel != nil {
		return &remoteRefusal{msg: w.Msg, sentinel: k.Sentinel}
	}
	return NewErrorOutcome(w.Code, withOutcome(k, w.Outcome).Outcome, errors.New(w.Msg))
}

// remoteRefusal is a refusal received from another node: its message as
// the peer wrote it, its identity from the code.
type remoteRefusal struct {
	msg      string
	sentinel error
}

func (e *remoteRefusal) Error() string { return e.msg }
func (e *remoteRefusal) Unwrap() error { return e.sentinel }
