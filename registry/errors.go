package registry

import (
	"errors"
)

var (
	// ErrNoDispenser: no dispenser is registered for the plugin type.
	ErrNoDispenser = errors.New("registry: no dispenser for plugin type")

	// ErrShutdown: the registry was shut down.
	ErrShutdown = errors.New("registry: shut down")
)
