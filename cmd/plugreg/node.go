package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/agent/pluginsock"
	"github.com/plugreg/plugreg/agent/pluginwatcher"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/telemetry"
	"github.com/plugreg/plugreg/tlsutil"
	"github.com/plugreg/plugreg/tracing"
	"github.com/plugreg/plugreg/ui"
)

// node is an agent, server or client, and its HTTP API, as run by agent
// and dev.
type node struct {
	srv    *cluster.Server // nil on a client agent
	client *agent.Client   // nil on a server
	core   lifecycle       // srv or client
	// the host's plugin discovery and anti-entropy, stopped before core;
	// nil until startServices
	services *agent.Services
	api      *httpapi.Server
	be       backend.Backend
	ln       net.Listener
	done     chan error // Serve's result
	// fatal receives a failure that stops the node while it runs (a
	// server's failed fsync of its log); nil on a client agent.
	fatal <-chan error
	once  sync.Once
	// stopping says what stop is doing now, for the log line of an
	// agent that gives up waiting.
	stopping atomic.Value // string
	tracer   *tracing.Tracer
	// probe serves -probe-port (nil: none); probeDone closes when it ends.
	probe     *httpapi.Probe
	probeDone chan struct{}
}

// setupMetrics routes go-metrics (raft's, memberlist's and ours) to
// telemetry's sink, once per process, and returns its HTTP handler (nil
// when it could not, which is logged).
func setupMetrics(logger hclog.Logger) http.Handler {
	h, err := telemetry.Configure()
	if err != nil {
		logger.Warn("metrics disabled", "error", err)
		return nil
	}
	return h
}

// traceFlushGrace bounds the wait at stop for the trace collector to take
// the spans still queued: a collector that is down must not hold a
// SIGTERM up (systemd and Kubernetes would kill the agent).
const traceFlushGrace = 2 * time.Second

// lifecycle is what the command needs of an agent's core, server or
// client: how it stops (gracefully with Leave, or not), and what it sees.
type lifecycle interface {
	Leave() error
	Shutdown() error
	// LiveServers is how many servers the agent's gossip sees alive.
	LiveServers() int
	// GossipMembers is how many members the agent's gossip knows.
	GossipMembers() int
}

// listenHTTP opens the HTTP port (the API serves HTTPS on it when tlsc
// serves TLS: apiOptions.tls).
func listenHTTP(httpAddr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on http port %s: %w", httpAddr, err)
	}
	return ln, nil
}

// apiOptions are the HTTP API's access settings.
type apiOptions struct {
	token string // the single write token of -acl-token ("" none)
	acl   httpapi.ACLConfig
	// limits of the HTTP API (zero: its defaults).
	limits httpapi.Limits
	// allowedHosts: -http-allowed-hosts (httpapi.Config.AllowedHosts).
	allowedHosts []string
	// keyring is the agent's gossip keyring, served to operators (nil:
	// gossip in plaintext).
	keyring *gossip.Keyring
	// requiredTypes: -required-plugin-types (httpapi.Config.RequiredTypes).
	requiredTypes []string
	// tracer records the node's spans (nil: tracing off); the node shuts
	// it down last.
	tracer *tracing.Tracer
}

// startNode starts a server and serves its HTTP API on httpAddr.
func startNode(cfg *cluster.Config, httpAddr string, ao apiOptions, tlsc *tlsutil.Configurator, onLeave func()) (*node, error) {
	ln, err := listenHTTP(httpAddr)
	if err != nil {
		return nil, err
	}
	cfg.HTTPAddr = ln.Addr().String()
	srv, err := cluster.New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	n := &node{srv: srv, core: srv, ln: ln, done: make(chan error, 1), fatal: srv.Fatal()}
	n.serve(srv.Backend(), cfg.Logger, ao, tlsc, onLeave)
	return n, nil
}

// startClientNode starts a client agent and serves its HTTP API on
// httpAddr.
func startClientNode(cfg agent.Config, httpAddr string, ao apiOptions, tlsc *tlsutil.Configurator, onLeave func()) (*node, error) {
	ln, err := listenHTTP(httpAddr)
	if err != nil {
		return nil, err
	}
	cfg.HTTPAddr = ln.Addr().String()
	cl, err := agent.New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	n := &node{client: cl, core: cl, ln: ln, done: make(chan error, 1)}
	n.serve(cl, cfg.Logger, ao, tlsc, onLeave)
	return n, nil
}

func (n *node) serve(be backend.Backend, logger hclog.Logger, ao apiOptions, tlsc *tlsutil.Configurator, onLeave func()) {
	n.be = be
	n.tracer = ao.tracer
	cfg := httpapi.Config{Backend: be, Logger: logger.Named("http"), Metrics: setupMetrics(logger), Token: ao.token, ACL: ao.acl, Limits: ao.limits, OnLeave: onLeave, UI: ui.Handler(), RequiredTypes: ao.requiredTypes,
		AllowedHosts: ao.allowedHosts, Tracer: ao.tracer}
	if tlsc.ServesTLS() {
		cfg.TLS = tlsc.IncomingConfig()
	}
	if ao.keyring != nil { // a nil *gossip.Keyring in the interface would not be nil
		cfg.Keyring = ao.keyring
	}
	n.api = httpapi.New(cfg)
	go func() { n.done <- n.api.Serve(n.ln) }()
}

// serveProbe serves the API's health alone in plain HTTP on addr
// (httpapi.Server.Probe); stop closes it first.
func (n *node) serveProbe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on probe port %s: %w", addr, err)
	}
	n.probe = n.api.Probe()
	n.probeDone = make(chan struct{})
	go func() {
		defer close(n.probeDone)
		n.probe.Serve(ln)
	}()
	return nil
}

// hostServices are what an agent runs for its host.
type hostServices struct {
	pluginsDir      string        // kubelet discovery; "" off
	pluginsDirMode  string        // pluginwatcher.Mode of pluginsDir; "" auto
	pluginSocket    string        // the SDK's socket; "" off
	pluginGrace     time.Duration // zero: pluginsock's default
	pluginConfigDir string
	// who may use the plugin socket (pluginsock.Config's Owner, Group,
	// AllowUIDs)
	pluginSocketOwner, pluginSocketGroup string
	pluginSocketAllowUIDs                []int
}

// startServices runs the host's plugin sources (the plugins dir, the
// plugin socket) and anti-entropy over the node's backend; stop stops them
// first.
func (n *node) startServices(h hostServices, logger hclog.Logger) error {
	cfg := agent.ServicesConfig{PluginsDir: h.pluginsDir, LiveServers: n.core.LiveServers, Members: n.core.GossipMembers, Logger: logger.Named("host")}
	if n.client != nil {
		cfg.EventStats = n.client.EventStats
	}
	cfg.Watcher.Mode = pluginwatcher.Mode(h.pluginsDirMode)
	if h.pluginSocket != "" {
		cfg.PluginSocket = &pluginsock.Config{Path: h.pluginSocket, Grace: h.pluginGrace, ConfigDir: h.pluginConfigDir, Events: n.be,
			Owner: h.pluginSocketOwner, Group: h.pluginSocketGroup, AllowUIDs: h.pluginSocketAllowUIDs}
	}
	svc, err := agent.StartServices(n.be, cfg)
	if err != nil {
		return err
	}
	n.services = svc
	return nil
}

// pluginsDirMode is the mode the node's plugins dir runs in (auto
// resolved), "" without one.
func (n *node) pluginsDirMode() string {
	if n.services == nil || n.services.Watcher == nil {
		return ""
	}
	return string(n.services.Watcher.Mode())
}

// pluginSocket is the path of the node's plugin socket, "" when it has none.
func (n *node) pluginSocket() string {
	if n.services == nil || n.services.Plugins == nil {
		return ""
	}
	return n.services.Plugins.Path()
}

// nodeID, gossipAddr and serverAddr describe the node for people.
func (n *node) nodeID() string { return n.be.NodeID() }
func (n *node) gossipAddr() string {
	if n.srv != nil {
		return n.srv.GossipAddr()
	}
	return n.client.GossipAddr()
}

// stage says what stop is doing ("running" before it starts).
func (n *node) stage() string {
	if s, ok := n.stopping.Load().(string); ok {
		return s
	}
	return "running"
}

// stop shuts the HTTP API and then the server down; with leave, the node
// leaves the cluster gracefully first. Idempotent.
func (n *node) stop(leave bool) error {
	var err error
	n.once.Do(func() {
		// In-flight requests get a short grace, then their connections
		// are closed: a stop must not wait on a client.
		n.stopping.Store("stopping the HTTP API")
		if n.probe != nil {
			n.probe.Close() // a stopping agent is not ready
			<-n.probeDone
		}
		ctx, cancel := context.WithTimeout(context.Background(), httpStopGrace)
		defer cancel()
		herr := n.api.Shutdown(ctx)
		if errors.Is(herr, context.DeadlineExceeded) {
			herr = n.api.Close()
		}
		<-n.done
		n.stopping.Store("stopping plugin discovery")
		if n.services != nil {
			n.services.Stop()
		}
		var serr error
		switch {
		case leave && n.srv != nil:
			n.stopping.Store("leaving the cluster (leadership transfer, removal from Raft)")
			serr = n.core.Leave()
		case leave:
			n.stopping.Store("leaving the gossip pool")
			serr = n.core.Leave()
		case n.srv != nil:
			n.stopping.Store("stopping Raft, gossip and the stores")
			serr = n.core.Shutdown()
		default:
			n.stopping.Store("stopping gossip")
			serr = n.core.Shutdown()
		}
		var terr error
		if n.tracer != nil {
			// The spans still queued go to the collector, or are
			// dropped when it does not take them within the grace.
			n.stopping.Store("flushing spans to the trace collector")
			tctx, tcancel := context.WithTimeout(context.Background(), traceFlushGrace)
			if terr = n.tracer.Shutdown(tctx); terr != nil {
				terr = fmt.Errorf("flush spans: %w", terr)
			}
			tcancel()
		}
		n.stopping.Store("stopped")
		err = errors.Join(herr, serr, terr)
	})
	return err
}
