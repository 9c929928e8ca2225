package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"
	promsink "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// node is a server and its HTTP API, as run by agent and dev.
type node struct {
	srv  *cluster.Server
	api  *httpapi.Server
	ln   net.Listener
	done chan error // Serve's result
	once sync.Once
	// stopping says what stop is doing now, for the log line of an
	// agent that gives up waiting.
	stopping atomic.Value // string
}

var (
	metricsOnce    sync.Once
	metricsHandler http.Handler
)

// setupMetrics routes go-metrics (raft's, memberlist's and ours) to a
// Prometheus sink, once per process, and returns its HTTP handler.
func setupMetrics(logger hclog.Logger) http.Handler {
	metricsOnce.Do(func() {
		sink, err := promsink.NewPrometheusSink()
		if err != nil {
			logger.Warn("metrics disabled", "error", err)
			return
		}
		conf := metrics.DefaultConfig("plugreg")
		conf.EnableHostname = false
		if _, err := metrics.NewGlobal(conf, sink); err != nil {
			logger.Warn("metrics disabled", "error", err)
			return
		}
		metricsHandler = promhttp.Handler()
	})
	return metricsHandler
}

// startNode starts a server and serves its HTTP API on httpAddr.
func startNode(cfg *cluster.Config, httpAddr, token string, onLeave func()) (*node, error) {
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on http port %s: %w", httpAddr, err)
	}
	cfg.HTTPAddr = ln.Addr().String()
	srv, err := cluster.New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	n := &node{srv: srv, ln: ln, done: make(chan error, 1)}
	n.api = httpapi.New(httpapi.Config{Backend: srv.Backend(), Logger: cfg.Logger.Named("http"), Metrics: setupMetrics(cfg.Logger), Token: token, OnLeave: onLeave})
	go func() { n.done <- n.api.Serve(ln) }()
	return n, nil
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
		ctx, cancel := context.WithTimeout(context.Background(), httpStopGrace)
		defer cancel()
		herr := n.api.Shutdown(ctx)
		if errors.Is(herr, context.DeadlineExceeded) {
			herr = n.api.Close()
		}
		<-n.done
		var serr error
		if leave {
			n.stopping.Store("leaving the cluster (leadership transfer, removal from Raft)")
			serr = n.srv.Leave()
		} else {
			n.stopping.Store("stopping Raft, gossip and the stores")
			serr = n.srv.Shutdown()
		}
		n.stopping.Store("stopped")
		err = errors.Join(herr, serr)
	})
	return err
}
