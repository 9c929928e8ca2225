package pluginwatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
)

// Watcher discovers kubelet-protocol plugins in a directory and registers
// them through a Registrar. Build it with New, run it with Start, end it
// with Stop.
type Watcher struct {
	cfg      Config
	log      hclog.Logger
	handlers map[string]Handler
	// stats count the probes (GetInfo calls) since start, for metrics.
	stats struct{ probes, failed, slow atomic.Uint64 }

	// mu guards the fields below it. It is never held while calling out.
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the loop has returned
	plugins []*api.PluginInfo
	changed chan struct{} // closed and replaced when plugins changes
	settled chan struct{} // closed once every socket of the first walk was tried

	// The loop goroutine (run) owns everything below; operations hand it
	// their outcome as a func on results, which run applies.
	results chan func()
	ops     sync.WaitGroup // operations in flight; run waits for them
	dsw     map[string]*socketState
	names   map[nameKey]*nameState
	seq     uint64
	initial map[string]uint64 // sockets of the first walk not yet tried, by incarnation
}

// New checks cfg and Dir (it must exist, be a directory and be readable)
// and returns a Watcher that does nothing until Start.
func New(cfg Config) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := checkDir(cfg.Dir); err != nil {
		return nil, err
	}
	// Paths are absolute and free of symbolic links, so that a socket's
	// path (and its AllocID) is the same whatever the agent was given, and
	// the walk, which follows no link, can enter Dir itself.
	dir, err := filepath.Abs(cfg.Dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: plugins dir %s: %v", ErrConfig, cfg.Dir, err)
	}
	cfg.Mode = resolveMode(cfg.Mode, cfg.Dir, dir)
	cfg.Dir = dir
	return &Watcher{
		cfg:      cfg,
		log:      cfg.Logger.Named("pluginwatcher"),
		handlers: cfg.Handlers,
		changed:  make(chan struct{}),
		settled:  make(chan struct{}),
		done:     make(chan struct{}),
		results:  make(chan func()),
		dsw:      make(map[string]*socketState),
		names:    make(map[nameKey]*nameState),
	}, nil
}

// Mode returns the mode the watcher runs in: ModeShared or ModeOwned
// (Config.Mode, ModeAuto resolved).
func (w *Watcher) Mode() Mode { return w.cfg.Mode }

// resolveMode resolves ModeAuto for a dir given as given and found at
// resolved: kubelet's dir under either name is shared (a link to it, or
// kubelet's root dir behind a link, is still the dir kubelet watches).
func resolveMode(m Mode, given, resolved string) Mode {
	if m.Resolve(given) == ModeShared {
		return ModeShared
	}
	return m.Resolve(resolved)
}

// notifies reports whether the watcher may send NotifyRegistrationStatus:
// only in a dir plugreg owns (see Mode).
func (w *Watcher) notifies() bool { return w.cfg.Mode == ModeOwned }

// Start watches Dir, walks it for the sockets already there, and starts
// the loop that registers them. ctx bounds the watcher's life: when it
// ends, the watcher stops as if Stop were called (Stop still waits for
// it). A second Start returns ErrStarted; Start after Stop, ErrStopped.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return ErrStopped
	}
	if w.started {
		return ErrStarted
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("pluginwatcher: watch %s: %w", w.cfg.Dir, err)
	}
	socks, err := w.walk(fsw, w.cfg.Dir)
	if err != nil {
		_ = fsw.Close()
		return fmt.Errorf("pluginwatcher: watch %s: %w", w.cfg.Dir, err)
	}
	w.initial = make(map[string]uint64, len(socks))
	for _, f := range socks {
		w.see(f)
		w.initial[f.path] = w.dsw[f.path].seq
	}
	ctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	w.started = true
	w.log.Info("watching for kubelet plugins", "dir", w.cfg.Dir, "mode", w.cfg.Mode, "sockets", len(socks))
	go w.run(ctx, fsw)
	return nil
}

// Settled is closed once every socket found at Start has been tried:
// registered (or found to belong to a name a newer socket holds), refused,
// failed once, or gone. Until then, the watcher's Plugins are not yet what
// the host has (a restarted agent has not re-discovered them all), and
// nothing should be removed for not being in it.
func (w *Watcher) Settled() <-chan struct{} { return w.settled }

// checkSettled closes settled when the first walk's sockets have all been
// tried. Called by the loop.
func (w *Watcher) checkSettled() {
	if w.initial == nil {
		return
	}
	for path, seq := range w.initial {
		s := w.dsw[path]
		if s == nil || s.seq != seq || s.failures > 0 {
			delete(w.initial, path) // gone, re-created, or failed
			continue
		}
		if !s.answered() {
			return
		}
		if n := w.names[s.key]; n == nil || n.busy || n.reg == nil {
			return // its name's registration has not run yet
		}
		delete(w.initial, path)
	}
	w.initial = nil
	close(w.settled)
}

// Stop ends the watcher and waits for all its goroutines; calls to a
// plugin or the Registrar in flight are canceled. It deregisters nothing:
// the registrations stay for the agent to re-assert when it comes back.
// Stop is idempotent.
func (w *Watcher) Stop() {
	w.mu.Lock()
	w.stopped = true
	started, cancel := w.started, w.cancel
	w.mu.Unlock()
	if !started {
		return
	}
	cancel()
	<-w.done
}

// Plugins returns copies of the instances the watcher holds registered:
// its host's desired set, newest socket per (Type, Name), sorted by Type
// then Name.
func (w *Watcher) Plugins() []*api.PluginInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	return copyAll(w.plugins)
}

func copyAll(in []*api.PluginInfo) []*api.PluginInfo {
	out := make([]*api.PluginInfo, len(in))
	for i, p := range in {
		out[i] = p.Copy()
	}
	return out
}

// publish makes the actual state of world visible to Plugins and Wait.
// Called by the loop after a registration changed.
func (w *Watcher) publish() {
	var plugins []*api.PluginInfo
	for _, n := range w.names {
		if n.reg != nil {
			plugins = append(plugins, n.reg.info.Copy())
		}
	}
	slices.SortFunc(plugins, func(a, b *api.PluginInfo) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Name, b.Name))
	})
	w.mu.Lock()
	w.plugins = plugins
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *Watcher) handler(typ string) Handler {
	if h, ok := w.handlers[typ]; ok {
		return h
	}
	return builtinHandler(typ)
}

// errStopping is what a step sees when the watcher stops under it.
var errStopping = errors.New("pluginwatcher: stopping")

// Stats count the watcher's probes of its sockets since it started.
type Stats struct {
	// Probes are GetInfo calls made; Failed those that got no valid
	// answer, Slow among them those that timed out (a plugin alive but
	// slow is suspect before it is dead).
	Probes, Failed, Slow uint64
}

// Stats returns the probe counters.
func (w *Watcher) Stats() Stats {
	return Stats{Probes: w.stats.probes.Load(), Failed: w.stats.failed.Load(), Slow: w.stats.slow.Load()}
}
