// Package otlpsink is an OTLP/HTTP endpoint that takes every export and
// counts it, as a collector that keeps up would: for runs that turn
// tracing on to measure it (plugreg-bench) or to put traced entries in
// the log under faults (the jepsen harness). Tests that read the spans
// use otlptest instead.
package otlpsink

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// Sink serves POST /v1/traces (any path: it takes what it is sent) on
// loopback until Close.
type Sink struct {
	URL             string // base URL, for -trace-endpoint
	srv             *http.Server
	done            chan struct{}
	exports, bytesN atomic.Int64
}

// Start listens on 127.0.0.1 on a free port.
func Start() (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{URL: "http://" + ln.Addr().String(), done: make(chan struct{})}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.exports.Add(1)
		s.bytesN.Add(n)
		// An empty body is an empty ExportTraceServiceResponse: all taken.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return s, nil
}

// Exports and Bytes count what was sent so far.
func (s *Sink) Exports() int64 { return s.exports.Load() }
func (s *Sink) Bytes() int64   { return s.bytesN.Load() }

// Close stops the sink. Idempotent.
func (s *Sink) Close() {
	s.srv.Close()
	<-s.done
}
