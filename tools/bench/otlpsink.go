package main

import (
	"strings"

	"github.com/plugreg/plugreg/internal/otlpsink"
)

// otlpSinkPlaceholder in -plugreg-flags or -baseline-flags is replaced by
// the URL of an OTLP/HTTP sink the bench serves (internal/otlpsink),
// so that a cluster can run with tracing on ("-trace-endpoint {otlp-sink}
// -trace-sample-rate 1") and its cost be measured against one without.
const otlpSinkPlaceholder = "{otlp-sink}"

// startOTLPSinkFor starts a sink when flags (of either cluster) name it,
// and puts its URL in their place; nil when none does.
func startOTLPSinkFor(flags ...*[]string) (*otlpsink.Sink, error) {
	named := false
	for _, fs := range flags {
		for _, f := range *fs {
			named = named || strings.Contains(f, otlpSinkPlaceholder)
		}
	}
	if !named {
		return nil, nil
	}
	s, err := otlpsink.Start(nil)
	if err != nil {
		return nil, err
	}
	for _, fs := range flags {
		out := make([]string, len(*fs))
		for i, f := range *fs {
			out[i] = strings.ReplaceAll(f, otlpSinkPlaceholder, s.URL)
		}
		*fs = out
	}
	return s, nil
}

// stopOTLPSink stops the sink and says what it took; nil-safe.
func stopOTLPSink(s *otlpsink.Sink) {
	if s == nil {
		return
	}
	s.Close()
	logf("OTLP sink: %d exports, %d bytes of spans", s.Exports(), s.Bytes())
}
