package fsm

import (
	"errors"
)

var (
	// ErrBadSnapshot marks a snapshot stream that cannot be restored. The
	// live state is untouched when Restore returns it.
	ErrBadSnapshot = errors.New("fsm: bad snapshot")

	// ErrStaleSnapshot marks a snapshot older than the state already
	// applied; Restore refuses it and leaves the state untouched.
	ErrStaleSnapshot = errors.New("fsm: snapshot is older than the applied state; refused")
)
