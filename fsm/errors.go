package fsm

import (
	"errors"

	"github.com/plugreg/plugreg/api"
)

var (
	// ErrInvalid marks a request that fails validation (api.ErrInvalid,
	// the same value: validation happens at the edge too).
	ErrInvalid = api.ErrInvalid

	// ErrTooLarge marks a request over one of the size limits (api.ErrTooLarge).
	ErrTooLarge = api.ErrTooLarge

	// ErrUnknownCommand marks a command type this binary does not know.
	ErrUnknownCommand = api.ErrUnknownCommand

	// ErrMalformed marks bytes that do not decode as a command.
	ErrMalformed = api.ErrMalformed

	// ErrConflict marks a conditional command whose condition did not hold
	// (api.ErrConflict).
	ErrConflict = api.ErrConflict

	// ErrBadSnapshot marks a snapshot stream that cannot be restored. The
	// live state is untouched when Restore returns it.
	ErrBadSnapshot = errors.New("fsm: bad snapshot")

	// ErrStaleSnapshot marks a snapshot older than the state already
	// applied; Restore refuses it and leaves the state untouched.
	ErrStaleSnapshot = errors.New("fsm: snapshot is older than the applied state; refused")

	// ErrNotFound marks a lookup of an instance, name or type that does not
	// exist.
	ErrNotFound = api.ErrNotFound
)
