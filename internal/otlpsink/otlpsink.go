// Package otlpsink is an OTLP/HTTP endpoint on loopback that takes every
// export, as a collector that keeps up would, and counts it: for runs
// that turn tracing on to measure it (plugreg-bench) or to put traced
// entries in the log under faults (the jepsen harness). A test that
// reads the spans passes a function that decodes each export
// (tests/framework/otlptest).
package otlpsink

import (
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// maxExport bounds one export's body (the exporter's own bound is 64 MiB).
const maxExport = 64 << 20

// Sink serves OTLP/HTTP trace exports (POST /v1/traces, where an
// exporter given the sink's URL as its base sends them) until Close.
type Sink struct {
	URL             string // base URL, for -trace-endpoint
	srv             *http.Server
	done            chan struct{}
	exports, bytesN atomic.Int64
}

// Start listens on 127.0.0.1 on a free port. onExport, if not nil, is
// given each export's body (decompressed); its error answers 400.
func Start(onExport func(body []byte) error) (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{URL: "http://" + ln.Addr().String(), done: make(chan struct{})}
	mux := http.NewServeMux()
	s.srv = &http.Server{Handler: mux}
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(io.LimitReader(body, maxExport))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if onExport != nil {
			if err := onExport(raw); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		s.exports.Add(1)
		s.bytesN.Add(int64(len(raw)))
		// An empty body is an empty ExportTraceServiceResponse: all taken.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return s, nil
}

// Exports and Bytes count what was taken so far.
func (s *Sink) Exports() int64 { return s.exports.Load() }
func (s *Sink) Bytes() int64   { return s.bytesN.Load() }

// Close stops the sink. Idempotent.
func (s *Sink) Close() {
	s.srv.Close()
	<-s.done
}
