package cluster

import (
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/fsm"
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
	CodeNoLeader       = "no_leader"        // not applied
	CodeEnqueueTimeout = "enqueue_timeout"  // not applied
	CodeNotLeader      = "not_leader"       // not applied
	CodeLeadershipLost = "leadership_lost"  // unknown
	CodeShutdown       = "shutdown"         // unknown
	CodeForwardFailed  = "forward_failed"   // unknown
	CodeTimeout        = "timeout"          // unknown
	CodeNotReady       = "leader_not_ready" // reads: the new leader has not committed in its term yet
	CodeStarting       = "not_ready"        // not applied: the node is starting and cannot answer RPC yet
)

// Error is a cluster-level failure of a write or a read, with a stable
// code and what it means for the write.
type Error struct {
	code    string
	outcome Outcome
	err     error
}

func (e *Error) Error() string    { return fmt.Sprintf("%s: %v", e.code, e.err) }
func (e *Error) Unwrap() error    { return e.err }
func (e *Error) Code() string     { return e.code }
func (e *Error) Outcome() Outcome { return e.outcome }

func notApplied(code string, err error) *Error { return &Error{code, NotApplied, err} }
func unknown(code string, err error) *Error    { return &Error{code, OutcomeUnknown, err} }

var (
	// ErrNoLeader: there is no known leader to serve the request.
	ErrNoLeader = errors.New("cluster: no leader; retry later")
	// ErrShutdown: the server is shutting down.
	ErrShutdown = errors.New("cluster: server shut down")
	// ErrStarting: the node is up on the network but its Raft is not, so
	// it cannot answer yet; ask again shortly, or ask another node.
	ErrStarting = errors.New("cluster: node is starting; retry shortly")
	// ErrShutdownAbandoned: Shutdown gave up waiting for Raft to stop.
	ErrShutdownAbandoned = errors.New("cluster: raft did not stop in time; its goroutines were abandoned")
)

// codeOutcome maps a code received from a peer back to its outcome.
func codeOutcome(code string) Outcome {
	switch code {
	case CodeNoLeader, CodeEnqueueTimeout, CodeNotLeader, CodeNotReady, CodeStarting:
		return NotApplied
	}
	return OutcomeUnknown
}

// rejections are the FSM's deterministic refusals, by the code that carries
// each across the forwarding RPC. A follower rebuilds the sentinel from the
// code, so that errors.Is works on both sides of the wire (Consul does the
// same with structs.ErrNoLeader).
var rejections = []struct {
	code string
	err  error
}{
	{"invalid", fsm.ErrInvalid},
	{"too_large", fsm.ErrTooLarge},
	{"malformed", fsm.ErrMalformed},
	{"unknown_command", fsm.ErrUnknownCommand},
}

// rejectionCode names err's sentinel for the wire ("" when it has none).
func rejectionCode(err error) string {
	for _, r := range rejections {
		if errors.Is(err, r.err) {
			return r.code
		}
	}
	return ""
}

// rejectedError is an FSM refusal received from another node: its message
// as the leader wrote it, its identity from the code.
type rejectedError struct {
	msg      string
	sentinel error // nil when the code is not one this binary knows
}

func (e *rejectedError) Error() string { return e.msg }
func (e *rejectedError) Unwrap() error { return e.sentinel }

// rejection rebuilds a refusal from its wire form. A peer that sent no code
// (an older binary) only ever rejected invalid input.
func rejection(code, msg string) error {
	if code == "" {
		code = "invalid"
	}
	for _, r := range rejections {
		if r.code == code {
			return &rejectedError{msg: msg, sentinel: r.err}
		}
	}
	return &rejectedError{msg: fmt.Sprintf("%s (code %q)", msg, code)}
}
