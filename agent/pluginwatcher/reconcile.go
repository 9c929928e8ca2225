package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/internal/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// run is the loop: the one goroutine that owns the desired and actual
// states of world. It applies file events and the outcomes of operations,
// then reconciles, until ctx ends; it then waits for the operations it
// started (they see ctx end too) and closes the fsnotify watcher.
func (w *Watcher) run(ctx context.Context, fsw *fsnotify.Watcher) {
	defer close(w.done)
	defer fsw.Close()
	defer w.ops.Wait()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := w.reconcile(ctx, time.Now())
		w.checkSettled()
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-fsw.Events:
			if !ok {
				return
			}
			w.event(fsw, ev)
		case err, ok := <-fsw.Errors:
			if !ok {
				return
			}
			w.log.Warn("file watch error", "dir", w.cfg.Dir, "error", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.rescan(fsw)
			}
		case apply := <-w.results:
			apply()
		case <-timer.C:
		}
	}
}

// event applies one file event to the desired state of world.
func (w *Watcher) event(fsw *fsnotify.Watcher, ev fsnotify.Event) {
	switch {
	case ev.Has(fsnotify.Create):
		for _, f := range w.created(fsw, ev.Name) {
			w.see(f)
		}
	case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
		w.forget(ev.Name)
	}
}

// rescan walks Dir again after the kernel dropped events: sockets found
// are seen, sockets in the desired state that are gone are forgotten.
func (w *Watcher) rescan(fsw *fsnotify.Watcher) {
	socks, err := w.walk(fsw, w.cfg.Dir)
	if err != nil {
		w.log.Error("cannot rescan the plugins dir", "dir", w.cfg.Dir, "error", err)
		return
	}
	present := make(map[string]bool, len(socks))
	for _, f := range socks {
		present[f.path] = true
		w.see(f)
	}
	for path := range w.dsw {
		if !present[path] {
			w.forget(path)
		}
	}
}

// see adds a socket to the desired state of world, or records a new
// incarnation of one already there (re-created with a new mtime).
func (w *Watcher) see(f found) {
	s := w.dsw[f.path]
	if s != nil && s.stamp.Equal(f.stamp) {
		return // the same socket, seen twice (a walk and an event)
	}
	w.seq++
	if s == nil {
		s = &socketState{path: f.path}
		w.dsw[f.path] = s
		w.log.Debug("socket found", "path", f.path)
	} else {
		w.log.Debug("socket re-created", "path", f.path)
	}
	s.stamp, s.seq = f.stamp, w.seq
	s.failures, s.retryAt, s.probeFailed = 0, time.Time{}, false
}

// forget removes a socket, or every socket below a removed directory, from
// the desired state of world. The reconciler then deregisters what they
// held.
func (w *Watcher) forget(path string) {
	prefix := path + string(filepath.Separator)
	for p := range w.dsw {
		if p == path || strings.HasPrefix(p, prefix) {
			delete(w.dsw, p)
			w.log.Debug("socket removed", "path", p)
		}
	}
}

// reconcile starts the operations the states of world call for, and
// returns how long the loop may sleep before something falls due.
func (w *Watcher) reconcile(ctx context.Context, now time.Time) time.Duration {
	wake := now.Add(time.Hour)
	due := func(t time.Time) bool {
		if !t.After(now) {
			return true
		}
		if t.Before(wake) {
			wake = t
		}
		return false
	}

	// Sockets: ask GetInfo of new incarnations and of failed sockets
	// once their backoff ends, and of live ones every ProbeInterval.
	for _, s := range w.dsw {
		if s.busy {
			continue
		}
		if !s.answered() {
			if due(s.retryAt) {
				w.startProbe(ctx, s)
			}
		} else if w.cfg.ProbeInterval > 0 && due(s.probeAt) {
			w.startProbe(ctx, s)
		}
	}

	// Names: the newest answering socket of a name is registered; a
	// name with none is deregistered.
	winners := make(map[nameKey]*socketState)
	var asking []*socketState // first GetInfo running: name not known yet
	for _, s := range w.dsw {
		if s.busy && !s.ok && s.failures == 0 {
			asking = append(asking, s)
		}
		if !s.ok {
			continue
		}
		if cur := winners[s.key]; cur == nil || s.newer(cur) {
			winners[s.key] = s
		}
		if w.names[s.key] == nil {
			w.names[s.key] = &nameState{}
		}
	}
	for key, n := range w.names {
		if n.busy {
			continue
		}
		w.unsureGone(key, n)
		if len(n.stale) > 0 && due(n.retryAt) {
			w.startDeregister(ctx, key, n)
			continue
		}
		win := winners[key]
		switch {
		case win != nil:
			// A newer socket whose first answer is pending may be of
			// this name: wait for it (at most GetInfoTimeout), so that
			// an older socket that answers first does not register and
			// get replaced at once (sockets found by the initial walk
			// are asked in no particular order).
			if slices.ContainsFunc(asking, func(a *socketState) bool { return a.newer(win) }) {
				continue
			}
			if n.reg == nil || n.reg.path != win.path || n.reg.seq != win.gotSeq || !infoEqual(n.reg.info, win.info) {
				w.startRegister(ctx, key, n, win)
			} else if !api.SameHealth(n.reg.info.Health, win.suspect) && due(n.healthRetryAt) {
				w.startHealth(ctx, key, n, win.suspect)
			}
		case n.reg != nil && w.mayStillBe(n.reg.path, key):
			// Its socket answered, but a new Register of it failed
			// (the cluster unreachable): it is retrying, from GetInfo,
			// and keeps what it has meanwhile.
		case n.reg != nil:
			w.log.Info("plugin gone; deregistering", "type", key.typ, "name", key.name, "socket", n.reg.path)
			n.stale = append(n.stale, n.reg.info)
			n.reg = nil
			w.publish()
			w.startDeregister(ctx, key, n)
		case n.idle():
			delete(w.names, key)
		}
	}
	return wake.Sub(now)
}

// mayStillBe reports whether the socket at path may still be the plugin
// key: it is there, its last probe did not fail, and it has not answered
// as another name since. A socket whose Register failed is one: it
// answered, only plugreg's write failed.
func (w *Watcher) mayStillBe(path string, key nameKey) bool {
	s := w.dsw[path]
	return s != nil && !s.probeFailed && !(s.answered() && s.key != key)
}

// unsureGone makes stale the name's unsure instances whose plugin is gone
// before a Register of it succeeded: the Registrar may hold them (the
// agent's Host would write them once the cluster is back), and nothing
// would ever remove them.
func (w *Watcher) unsureGone(key nameKey, n *nameState) {
	for alloc, r := range n.unsure {
		if w.mayStillBe(r.path, key) {
			continue
		}
		w.log.Info("plugin gone before it was registered; deregistering what the failed registration may have left",
			"type", key.typ, "name", key.name, "socket", r.path)
		n.stale = append(n.stale, r.info)
		delete(n.unsure, alloc)
	}
}

// backoff returns the jittered wait after the n-th consecutive failure:
// RetryMin doubling up to RetryMax, then a random point in its upper half.
func (w *Watcher) backoff(n int) time.Duration {
	return backoff.Jittered(w.cfg.RetryMin, w.cfg.RetryMax, n)
}

// goOp runs op on a goroutine owned by the loop; op's outcome is applied
// by the loop, unless the watcher is stopping.
func (w *Watcher) goOp(ctx context.Context, op func() func()) {
	w.ops.Add(1)
	go func() {
		defer w.ops.Done()
		apply := op()
		select {
		case w.results <- apply:
		case <-ctx.Done():
		}
	}()
}

// startProbe asks the socket GetInfo and validates the answer. A plugin
// that answers but is refused is told why.
func (w *Watcher) startProbe(ctx context.Context, s *socketState) {
	s.busy = true
	path, seq := s.path, s.seq
	// The registration of this socket whose plugin was not told yet.
	var untold *registration
	if n := w.names[s.key]; s.answered() && n != nil && n.reg != nil && n.reg.path == path && n.reg.seq == seq && !n.reg.told {
		untold = n.reg
	}
	w.goOp(ctx, func() func() {
		key, info, err := w.probe(ctx, path)
		w.stats.probes.Add(1)
		if err != nil {
			w.stats.failed.Add(1)
			if errors.Is(err, errSlow) {
				w.stats.slow.Add(1)
			}
		}
		told := false
		if err == nil && untold != nil {
			told = w.retell(ctx, path)
		}
		return func() {
			s.busy = false
			if told {
				untold.told = true
			}
			if w.dsw[path] != s || s.seq != seq {
				return // removed, or re-created, meanwhile
			}
			now := time.Now()
			if err != nil && s.ok && errors.Is(err, errSlow) && s.slow+1 < w.cfg.SlowProbes {
				// Alive but slow: keep it registered, suspect, and
				// ask again soon.
				if s.slow == 0 {
					s.suspect = &api.InstanceHealth{Status: api.HealthSuspect, Check: api.CheckProbe,
						Reason: fmt.Sprintf("GetInfo timed out after %v", w.cfg.GetInfoTimeout), LastSeen: s.answeredAt.UTC()}
				}
				s.slow++
				s.probeAt = now.Add(w.cfg.RetryMin)
				w.log.Warn("registered plugin slow to answer; keeping it registered for now", "socket", path,
					"error", err, "slow_probes", s.slow, "of", w.cfg.SlowProbes)
				return
			}
			s.slow, s.suspect = 0, nil
			s.probeFailed = err != nil
			if err != nil {
				if s.ok {
					w.log.Warn("plugin stopped answering", "socket", path, "error", err)
				}
				s.ok = false
				s.failures++
				s.retryAt = now.Add(w.backoff(s.failures))
				// A socket nobody serves any more (a plugin that died
				// without removing it) fails forever: say so once, then
				// quietly.
				logf := w.log.Debug
				if s.failures == 1 {
					logf = w.log.Warn
				}
				logf("plugin not registered; will retry", "socket", path, "error", err, "attempt", s.failures,
					"retry_in", s.retryAt.Sub(now).Round(time.Millisecond))
				return
			}
			if s.failures > 0 {
				w.log.Info("plugin answers again", "socket", path, "type", key.typ, "name", key.name)
			}
			s.ok, s.gotSeq, s.key, s.info = true, seq, key, info
			s.probeAt, s.answeredAt = now.Add(w.cfg.ProbeInterval), now
		}
	})
}

// startHealth writes the registered instance of the name again with the
// health h (nil: passing): its probes began or ceased to time out. It
// does not speak to the plugin (it may be hanging); a failed write is
// tried again after a backoff, while the health still differs.
func (w *Watcher) startHealth(ctx context.Context, key nameKey, n *nameState, h *api.InstanceHealth) {
	n.busy = true
	reg := n.reg
	info := reg.info.Copy()
	info.Health = h.Copy()
	w.goOp(ctx, func() func() {
		err := w.cfg.Registrar.Register(ctx, info.Copy())
		return func() {
			n.busy = false
			if err != nil {
				n.healthFailures++
				n.healthRetryAt = time.Now().Add(w.backoff(n.healthFailures))
				w.log.Warn("health not written; will retry", "type", key.typ, "name", key.name, "suspect", h != nil, "error", stopping(ctx, err))
				return
			}
			n.healthFailures, n.healthRetryAt = 0, time.Time{}
			if n.reg == reg {
				reg.info = info
			}
			if h != nil {
				w.log.Warn("plugin marked suspect", "type", key.typ, "name", key.name, "socket", reg.path, "reason", h.Reason)
			} else {
				w.log.Info("plugin passing again", "type", key.typ, "name", key.name, "socket", reg.path)
			}
		}
	})
}

// startRegister registers the name's newest socket, then deregisters the
// instance it replaces, then tells the plugin.
func (w *Watcher) startRegister(ctx context.Context, key nameKey, n *nameState, win *socketState) {
	n.busy = true
	path, seq, info := win.path, win.gotSeq, win.info.Copy()
	var replaced = n.reg
	w.goOp(ctx, func() func() {
		leftover, told, err := w.register(ctx, path, info, replaced)
		return func() {
			n.busy = false
			if err != nil {
				w.log.Warn("registration failed; will retry from GetInfo", "type", key.typ, "name", key.name, "socket", path, "error", err)
				n.failedToRegister(&registration{path: path, seq: seq, info: info})
				if s := w.dsw[path]; s != nil && s.seq == seq {
					s.ok = false
					s.failures++
					s.retryAt = time.Now().Add(w.backoff(s.failures))
				}
				return
			}
			w.log.Info("plugin registered", "type", key.typ, "name", key.name, "socket", path, "alloc_id", info.AllocID)
			n.reg = &registration{path: path, seq: seq, info: info, told: told}
			if n.registered(info) {
				w.log.Info("pending deregistration dropped: the same instance is registered again", "type", key.typ, "name", key.name,
					"socket", path, "alloc_id", info.AllocID)
			}
			if leftover != nil {
				n.stale = append(n.stale, leftover)
				n.retryAt = time.Now().Add(w.backoff(1))
			}
			if s := w.dsw[path]; s != nil && s.seq == seq {
				s.failures = 0
			}
			w.publish()
		}
	})
}

// startDeregister removes the name's stale registrations; those that
// fail stay, for a retry after the backoff.
func (w *Watcher) startDeregister(ctx context.Context, key nameKey, n *nameState) {
	n.busy = true
	stale := n.stale
	n.stale = nil
	w.goOp(ctx, func() func() {
		failed := w.deregister(ctx, stale)
		return func() {
			n.busy = false
			if len(failed) == 0 {
				n.failures = 0
				return
			}
			n.stale = append(failed, n.stale...)
			n.failures++
			n.retryAt = time.Now().Add(w.backoff(n.failures))
		}
	})
}

// stopping returns errStopping once ctx has ended, so that a step cut
// short by Stop says so.
func stopping(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errStopping
	}
	return err
}

// probe dials the socket, asks GetInfo and validates the answer.
func (w *Watcher) probe(ctx context.Context, path string) (nameKey, *api.PluginInfo, error) {
	c, err := dialPlugin(path)
	if err != nil {
		return nameKey{}, nil, err
	}
	defer c.Close()
	gi, err := c.getInfo(ctx, w.cfg.GetInfoTimeout)
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil && accepts(path, w.cfg.GetInfoTimeout) {
			err = fmt.Errorf("%w: %v", errSlow, err)
		}
		err = stopping(ctx, fmt.Errorf("GetInfo: %w", err))
		if answered(err) && ctx.Err() == nil {
			w.tell(ctx, c, path, false, err.Error())
		}
		return nameKey{}, nil, err
	}
	key, info, err := w.validate(path, gi)
	if err != nil {
		w.log.Warn("plugin refused", "socket", path, "type", gi.GetType(), "name", trim(gi.GetName()), "error", err)
		w.tell(ctx, c, path, false, err.Error())
		return nameKey{}, nil, err
	}
	return key, info, nil
}

// register runs Register for info, then Deregister for the instance it
// replaces (returned if that fails), then notifies the plugin.
func (w *Watcher) register(ctx context.Context, path string, info *api.PluginInfo, replaced *registration) (leftover *api.PluginInfo, told bool, err error) {
	c, err := dialPlugin(path)
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	if err := w.cfg.Registrar.Register(ctx, info.Copy()); err != nil {
		err = stopping(ctx, fmt.Errorf("register: %w", err))
		// plugreg's own failures are retried, not told: a plugin told
		// "not registered" may exit (kubernetes/kubernetes#69992).
		if ctx.Err() == nil && refusesPlugin(err) {
			w.tell(ctx, c, path, false, err.Error())
		}
		return nil, false, err
	}
	if replaced != nil && replaced.info.AllocID != info.AllocID {
		w.log.Info("deregistering the instance replaced", "type", info.Type, "name", info.Name, "socket", replaced.path)
		if err := w.cfg.Registrar.Deregister(ctx, replaced.info.Copy()); err != nil {
			w.log.Warn("deregistering the replaced instance failed; will retry", "socket", replaced.path, "error", err)
			leftover = replaced.info
		}
	}
	return leftover, w.tell(ctx, c, path, true, ""), nil
}

// deregister runs Deregister for each instance and returns those that
// failed.
func (w *Watcher) deregister(ctx context.Context, infos []*api.PluginInfo) []*api.PluginInfo {
	var failed []*api.PluginInfo
	for _, info := range infos {
		if err := w.cfg.Registrar.Deregister(ctx, info.Copy()); err != nil {
			w.log.Warn("deregistration failed; will retry", "type", info.Type, "name", info.Name,
				"alloc_id", info.AllocID, "error", stopping(ctx, err))
			failed = append(failed, info)
			continue
		}
		w.log.Info("plugin deregistered", "type", info.Type, "name", info.Name, "alloc_id", info.AllocID)
	}
	return failed
}

// retell sends a registered plugin the NotifyRegistrationStatus(true) it
// missed.
func (w *Watcher) retell(ctx context.Context, path string) bool {
	c, err := dialPlugin(path)
	if err != nil {
		return false
	}
	defer c.Close()
	ok := w.tell(ctx, c, path, true, "")
	if ok {
		w.log.Info("plugin told it is registered, after a failed first notice", "socket", path)
	}
	return ok
}

// tell sends NotifyRegistrationStatus and reports whether nothing more is
// owed to the plugin: it took the notice, or the dir is shared, where
// kubelet answers its plugins and plugreg never does (Mode). Every notice
// goes through here. A failed "registered" is sent again after the next
// successful probe (kubelet does not retry it; the scale bench saw plugins
// never told on a loaded host); a failed refusal is logged only.
func (w *Watcher) tell(ctx context.Context, c *pluginConn, path string, registered bool, reason string) bool {
	if !w.notifies() {
		return true
	}
	err := c.notify(ctx, w.cfg.GetInfoTimeout, registered, reason)
	switch {
	case err == nil || ctx.Err() != nil:
	case registered:
		w.log.Warn("NotifyRegistrationStatus failed", "socket", path, "registered", registered, "error", err)
	default:
		// The DRA helper answers a refusal with an error of its own.
		w.log.Debug("NotifyRegistrationStatus failed", "socket", path, "registered", registered, "error", err)
	}
	return err == nil
}

// validate turns a GetInfo answer into the registration, or says why not.
func (w *Watcher) validate(path string, gi *registerapi.PluginInfo) (nameKey, *api.PluginInfo, error) {
	if err := api.ValidateIdentifier("type", gi.GetType()); err != nil {
		return nameKey{}, nil, fmt.Errorf("GetInfo type: %w", err)
	}
	if err := api.ValidateIdentifier("name", gi.GetName()); err != nil {
		return nameKey{}, nil, fmt.Errorf("GetInfo name: %w", err)
	}
	endpoint := gi.GetEndpoint()
	if endpoint == "" {
		endpoint = path
	}
	version, err := w.handler(gi.GetType()).Validate(gi.GetName(), endpoint, gi.GetSupportedVersions())
	if err != nil {
		return nameKey{}, nil, err
	}
	info := buildInfo(w.cfg.NodeID, path, gi.GetType(), gi.GetName(), endpoint, version, gi.GetSupportedVersions())
	// The kubelet socket's edge: the host and the agent's client pass it
	// on as is.
	if err := api.ValidateNewPlugin(info); err != nil {
		return nameKey{}, nil, fmt.Errorf("registration of %s: %w", path, err)
	}
	return nameKey{gi.GetType(), gi.GetName()}, info, nil
}

// trim shortens untrusted text for a log line.
func trim(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
