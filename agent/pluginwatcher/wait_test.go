package pluginwatcher

import (
	"context"

	"github.com/plugreg/plugreg/api"
)

// Wait blocks until cond holds for Plugins(), ctx ends (its error is
// returned), or the watcher stops (ErrStopped).
func (w *Watcher) Wait(ctx context.Context, cond func([]*api.PluginInfo) bool) error {
	for {
		w.mu.Lock()
		plugins, changed, done := copyAll(w.plugins), w.changed, w.done
		stopped := w.stopped
		w.mu.Unlock()
		if cond(plugins) {
			return nil
		}
		if stopped {
			return ErrStopped
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-done:
			// Stopped (by Stop or Start's ctx): one last look.
			if cond(w.Plugins()) {
				return nil
			}
			return ErrStopped
		}
	}
}
