package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
)

// otlpSinkPlaceholder in -plugreg-flags or -baseline-flags is replaced by
// the URL of an OTLP/HTTP sink the bench serves, so that a cluster can
// run with tracing on ("-trace-endpoint {otlp-sink} -trace-sample-rate 1")
// and its cost be measured against one without. The sink takes every
// export, as a collector that keeps up would, and counts it.
const otlpSinkPlaceholder = "{otlp-sink}"

type otlpSink struct {
	srv             *http.Server
	url             string
	requests, bytes atomic.Int64
}

// startOTLPSinkFor starts a sink when flags (of either cluster) name it,
// and puts its URL in their place; nil when none does.
func startOTLPSinkFor(flags ...*[]string) (*otlpSink, error) {
	named := false
	for _, fs := range flags {
		for _, f := range *fs {
			named = named || strings.Contains(f, otlpSinkPlaceholder)
		}
	}
	if !named {
		return nil, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		s.bytes.Add(n)
		// An empty body is an empty ExportTraceServiceResponse: all taken.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go s.srv.Serve(ln)
	for _, fs := range flags {
		out := make([]string, len(*fs))
		for i, f := range *fs {
			out[i] = strings.ReplaceAll(f, otlpSinkPlaceholder, s.url)
		}
		*fs = out
	}
	return s, nil
}

// stop stops the sink; nil-safe.
func (s *otlpSink) stop() {
	if s == nil {
		return
	}
	s.srv.Close()
	logf("OTLP sink: %d exports, %d bytes of spans", s.requests.Load(), s.bytes.Load())
}
