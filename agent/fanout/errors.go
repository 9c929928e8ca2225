package fanout

import "errors"

var (
	// ErrClosed: the hub was closed.
	ErrClosed = errors.New("fanout: hub closed")

	// ErrUpstream: the filter's upstream could not be opened (no server
	// reachable); the hub keeps trying, so retry the subscription.
	ErrUpstream = errors.New("fanout: upstream unavailable; retry")
)
