package registry

import "errors"

var (
	// ErrNotFound: no such plugin type, name or allocation.
	ErrNotFound = errors.New("registry: plugin not found")

	// ErrNoDispenser: no dispenser is registered for the plugin type.
	ErrNoDispenser = errors.New("registry: no dispenser for plugin type")

	// ErrShutdown: the registry was shut down.
	ErrShutdown = errors.New("registry: shut down")
)
