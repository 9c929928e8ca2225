package httpapi

import (
	"errors"
	"net"
	"net/http"
	"time"
)

// The probe port's bounds. kubelet's probes send one GET without a body
// and close their connection, so a connection there has no reason to stay
// open long: a slow or idle one is closed well before the API's would be.
const (
	probeReadTimeout = 10 * time.Second
	probeIdleTimeout = 10 * time.Second
	// health may read this node's plugins (checkRequiredTypes), bounded
	// by readTimeout.
	probeWriteTimeout = readTimeout + 5*time.Second
)

// Probe serves ProbeHandler on a listener of its own (the agent's
// -probe-port), bounded as the API is: at most Limits.MaxConnsPerClient
// connections from one IP address, and read, write and idle timeouts.
// Unauthenticated and in plain HTTP on every pod IP, it was the one
// listener an attacker could fill with idle connections until the agent
// ran out of file descriptors.
type Probe struct {
	http     *http.Server
	maxConns int
}

// Probe returns the probe port's server; call Serve.
func (s *Server) Probe() *Probe {
	return &Probe{
		http: &http.Server{Handler: s.ProbeHandler(), ReadHeaderTimeout: probeReadTimeout, ReadTimeout: probeReadTimeout,
			WriteTimeout: probeWriteTimeout, IdleTimeout: min(s.cfg.IdleTimeout, probeIdleTimeout)},
		maxConns: s.cfg.Limits.MaxConnsPerClient,
	}
}

// Serve serves ln, in plain HTTP, until Close; it returns nil after Close.
func (p *Probe) Serve(ln net.Listener) error {
	if err := p.http.Serve(limitConns(ln, p.maxConns, nil)); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close closes the listener and every connection.
func (p *Probe) Close() error { return p.http.Close() }
