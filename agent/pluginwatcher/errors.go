package pluginwatcher

import "errors"

var (
	// ErrConfig marks a Config that Validate or New refuses; it is wrapped
	// with the field (and, for Dir, the path) at fault.
	ErrConfig = errors.New("pluginwatcher: invalid config")

	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("pluginwatcher: already started")

	// ErrStopped is returned by Start after Stop, and by Wait once the
	// watcher has stopped.
	ErrStopped = errors.New("pluginwatcher: stopped")

	// errSlow marks a GetInfo that timed out on a socket that accepts
	// connections: the plugin is alive but did not answer in time.
	errSlow = errors.New("pluginwatcher: plugin accepts connections but did not answer in time")
)
