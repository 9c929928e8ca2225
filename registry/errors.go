package registry

import "errors"

// ErrShutdown: the hub (or its journal) was shut down.
var ErrShutdown = errors.New("registry: shut down")
