package registry

import (
	"errors"

	"github.com/plugreg/plugreg/api"
)

var (
	// ErrNotFound: no such plugin type, name or allocation.
	ErrNotFound = api.ErrNotFound

	// ErrNoDispenser: no dispenser is registered for the plugin type.
	ErrNoDispenser = errors.New("registry: no dispenser for plugin type")

	// ErrShutdown: the registry was shut down.
	ErrShutdown = errors.New("registry: shut down")
)
