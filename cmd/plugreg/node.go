package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"
	promsink "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/transport/httpapi"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// node is a server and its HTTP API, as run by agent and dev.
type node struct {
	srv  *cluster.Server
	api  *httpapi.Server
	ln   net.Listener
	done chan error // Serve's result
	once sync.Once
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
	n.api = httpapi.New(httpapi.Config{Server: srv, Logger: cfg.Logger.Named("http"), Metrics: setupMetrics(cfg.Logger), Token: token, OnLeave: onLeave})
	go func() { n.done <- n.api.Serve(ln) }()
	return n, nil
}

// stop shuts the HTTP API and then the server down; with leave, the node
// leaves the cluster gracefully first. Idempotent.
func (n *node) stop(leave bool) error {
	var err error
	n.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		herr := n.api.Shutdown(ctx)
		<-n.done
		var serr error
		if leave {
			serr = n.srv.Leave()
		} else {
			serr = n.srv.Shutdown()
		}
		err = errors.Join(herr, serr)
	})
	return err
}
