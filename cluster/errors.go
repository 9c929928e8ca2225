package cluster

import (
	"errors"
	"fmt"
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
)

// codeOutcome maps a code received from a peer back to its outcome.
func codeOutcome(code string) Outcome {
	switch code {
	case CodeNoLeader, CodeEnqueueTimeout, CodeNotLeader, CodeNotReady:
		return NotApplied
	}
	return OutcomeUnknown
}
