package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/plugreg/plugreg/agent/fanout"
	"github.com/plugreg/plugreg/agent/pluginsock"
	"github.com/plugreg/plugreg/agent/pluginwatcher"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/telemetry"
)

// ServicesConfig configures what an agent runs for its host.
type ServicesConfig struct {
	// PluginsDir, when set, is watched for kubelet-protocol plugin
	// sockets (it must exist and be readable).
	PluginsDir string
	// PluginSocket, when set, is the plugin socket's configuration (its
	// Path at least): plugins connect there with the SDK (package stub).
	// NodeID, Registrar and Logger are set here; Events must be set.
	PluginSocket *pluginsock.Config
	// SyncInterval of anti-entropy (zero: 30s).
	SyncInterval time.Duration
	// LiveServers reports how many servers the agent sees alive; a rise
	// triggers an anti-entropy round (see HostConfig). May be nil.
	LiveServers func() int
	// Members reports how many members the agent's gossip knows: the
	// anti-entropy interval scales with it (see HostConfig). May be nil.
	Members func() int
	// Watcher tunes discovery; Dir, NodeID, Registrar and Logger are set
	// here. Zero fields take pluginwatcher's defaults.
	Watcher pluginwatcher.Config
	Logger  hclog.Logger
	// EventStats, when set, are the client agent's event fan-out's
	// counters, published as metrics with the rest.
	EventStats func() fanout.Stats
}

// Services are a host's plugin sources and the Host they write through,
// with its anti-entropy running.
type Services struct {
	Host    *Host
	Watcher *pluginwatcher.Watcher // nil without PluginsDir
	Plugins *pluginsock.Server     // nil without PluginSocket

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// StartServices starts the host's services over be (a server's or a
// client agent's Backend). It fails at once on a plugins dir that does not
// exist or cannot be read.
func StartServices(be Writer, cfg ServicesConfig) (*Services, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	var sources []string
	if cfg.PluginsDir != "" {
		sources = append(sources, api.SourceKubelet)
	}
	if cfg.PluginSocket != nil {
		sources = append(sources, api.SourceStub)
	}
	host, err := NewHost(HostConfig{Backend: be, Sources: sources, SyncInterval: cfg.SyncInterval,
		LiveServers: cfg.LiveServers, Members: cfg.Members, Logger: cfg.Logger.Named("anti-entropy")})
	if err != nil {
		return nil, err
	}
	s := &Services{Host: host}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if cfg.PluginsDir != "" {
		wc := cfg.Watcher
		wc.Dir, wc.NodeID, wc.Registrar, wc.Logger = cfg.PluginsDir, be.NodeID(), host, cfg.Logger
		if s.Watcher, err = pluginwatcher.New(wc); err != nil {
			cancel()
			return nil, fmt.Errorf("plugins dir: %w", err)
		}
		if err := s.Watcher.Start(ctx); err != nil {
			cancel()
			return nil, fmt.Errorf("plugins dir: %w", err)
		}
		s.readyWhen(ctx, s.Watcher.Settled(), api.SourceKubelet)
	}
	if cfg.PluginSocket != nil {
		pc := *cfg.PluginSocket
		pc.NodeID, pc.Registrar, pc.Logger = be.NodeID(), host, cfg.Logger.Named("plugin-socket")
		if s.Plugins, err = pluginsock.Listen(pc); err != nil {
			s.Stop()
			return nil, err
		}
		s.readyWhen(ctx, s.Plugins.Settled(), api.SourceStub)
	}
	if len(sources) > 0 { // nothing to keep right otherwise
		s.goFunc(func() { host.Run(ctx) })
	}
	s.goFunc(func() { s.emitMetrics(ctx, be.NodeID(), cfg.EventStats) })
	return s, nil
}

// emitMetrics publishes the host's counts once a second (telemetry): its
// anti-entropy, its plugin sessions, a client agent's fan-out.
func (s *Services) emitMetrics(ctx context.Context, node string, events func() fanout.Stats) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	nl := metrics.Label{Name: "node", Value: node}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hs := s.Host.Stats()
		telemetry.SetCounter64([]string{"anti_entropy", "rounds"}, float64(hs.Rounds), nl)
		telemetry.SetCounter64([]string{"anti_entropy", "failed_rounds"}, float64(hs.Failed), nl)
		telemetry.SetCounter64([]string{"anti_entropy", "registered"}, float64(hs.Registered), nl)
		telemetry.SetCounter64([]string{"anti_entropy", "deregistered"}, float64(hs.Deregistered), nl)
		telemetry.SetCounter64([]string{"anti_entropy", "writes"}, float64(hs.Writes), nl)
		if s.Watcher != nil {
			ws := s.Watcher.Stats()
			telemetry.SetCounter64([]string{"plugins_dir", "probes"}, float64(ws.Probes), nl)
			telemetry.SetCounter64([]string{"plugins_dir", "probe_failures"}, float64(ws.Failed), nl)
			telemetry.SetCounter64([]string{"plugins_dir", "slow_probes"}, float64(ws.Slow), nl)
		}
		if s.Plugins != nil {
			ps := s.Plugins.Stats()
			telemetry.SetGauge64([]string{"plugin_socket", "sessions_live"}, float64(ps.Live), nl)
			telemetry.SetGauge64([]string{"plugin_socket", "sessions_in_grace"}, float64(ps.InGrace), nl)
			telemetry.SetCounter64([]string{"plugin_socket", "sessions"}, float64(ps.Sessions), nl)
			telemetry.SetCounter64([]string{"plugin_socket", "reclaims"}, float64(ps.Reclaims), nl)
			telemetry.SetCounter64([]string{"plugin_socket", "expired"}, float64(ps.Expired), nl)
			telemetry.SetCounter64([]string{"plugin_socket", "stopped"}, float64(ps.Stopped), nl)
			telemetry.SetCounter64([]string{"plugin_socket", "refused"}, float64(ps.Refused), nl)
		}
		if events != nil {
			es := events()
			telemetry.SetGauge64([]string{"fanout", "upstreams"}, float64(es.Upstreams), nl)
			telemetry.SetGauge64([]string{"fanout", "subscribers"}, float64(es.Subscribers), nl)
			telemetry.SetCounter64([]string{"fanout", "upstream_opens"}, float64(es.UpstreamOpens), nl)
			telemetry.SetCounter64([]string{"fanout", "fell_behind"}, float64(es.FellBehind), nl)
		}
	}
}

// readyWhen tells the host that source made its first pass once settled
// is closed (anti-entropy removes nothing of a source before that).
func (s *Services) readyWhen(ctx context.Context, settled <-chan struct{}, source string) {
	s.goFunc(func() {
		select {
		case <-settled:
			s.Host.Ready(source)
		case <-ctx.Done():
		}
	})
}

func (s *Services) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Stop stops discovery and anti-entropy. It deregisters nothing: the host's
// registrations stay for the agent to re-assert when it comes back (or for
// the leader to reap if it does not). Idempotent.
func (s *Services) Stop() {
	s.once.Do(func() {
		s.cancel()
		if s.Watcher != nil {
			s.Watcher.Stop()
		}
		if s.Plugins != nil {
			s.Plugins.Stop()
		}
		s.wg.Wait()
	})
}
