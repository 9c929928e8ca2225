package cluster

import (
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/api"
)

func notApplied(code string, err error) *api.Error {
	return api.NewErrorOutcome(code, api.NotApplied, err)
}
func unknown(code string, err error) *api.Error {
	return api.NewErrorOutcome(code, api.OutcomeUnknown, err)
}

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
	// ErrPeersJSON: the data dir's peers.json was refused, or applying it
	// failed; the message says which and what to do.
	ErrPeersJSON = errors.New("cluster: peers.json")
	// ErrDataDirInUse: a running agent holds the data dir's log store.
	ErrDataDirInUse = errors.New("cluster: data dir in use by a running agent; stop it first")
)

// notFoundError refuses a call that names something that does not exist:
// its message alone, worded as Consul words the same refusal (what
// operators and their scripts look for), and api.ErrNotFound for
// errors.Is and the error table (HTTP 404 not_found).
type notFoundError struct{ msg string }

func notFound(msg string) error { return &notFoundError{msg: msg} }

func (e *notFoundError) Error() string { return e.msg }
func (e *notFoundError) Unwrap() error { return api.ErrNotFound }

// rejectionCode names the sentinel of an FSM refusal for the wire ("" when
// it has none).
func rejectionCode(err error) string { return api.RefusalCode(err) }

// rejectedError is an FSM refusal whose code this binary does not know
// (from a newer leader): its message, and no identity.
type rejectedError struct{ msg string }

func (e *rejectedError) Error() string { return e.msg }

// rejection rebuilds a refusal from its wire form. A peer that sent no code
// (an older binary) only ever rejected invalid input.
func rejection(code, msg string) error {
	if code == "" {
		code = api.CodeInvalid
	}
	if err := (&api.WireError{Code: code, Msg: msg}).Err(); api.RefusalCode(err) != "" {
		return err
	}
	return &rejectedError{msg: fmt.Sprintf("%s (code %q)", msg, code)}
}
