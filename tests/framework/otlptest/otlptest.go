// Package otlptest is an OTLP/HTTP trace receiver for tests: what a
// collector (Jaeger, Tempo, the OpenTelemetry Collector) is to a plugreg
// agent's exporter, on loopback, keeping every span it is sent.
package otlptest

import (
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/plugreg/plugreg/internal/otlpsink"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, its IDs in hex.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Node                          string // the resource's service.instance.id
	Service                       string // the resource's service.name
	Attributes                    map[string]string
}

// Receiver keeps every span an OTLP/HTTP exporter sends it (an
// otlpsink.Sink decoding each export) until the test ends.
type Receiver struct {
	URL string // base URL: http://127.0.0.1:port

	mu    sync.Mutex
	spans []Span
}

// Start starts a receiver; t's cleanup stops it.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	sink, err := otlpsink.Start(r.take)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	r.URL = sink.URL
	return r
}

// take decodes one export and keeps its spans.
func (r *Receiver) take(raw []byte) error {
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		return fmt.Errorf("not an ExportTraceServiceRequest: %w", err)
	}
	var got []Span
	for _, rs := range msg.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				attrs := map[string]string{}
				for _, kv := range sp.Attributes {
					v := kv.GetValue()
					if _, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
						attrs[kv.Key] = v.GetStringValue()
					} else {
						attrs[kv.Key] = fmt.Sprint(v.GetIntValue())
					}
				}
				got = append(got, Span{TraceID: hex.EncodeToString(sp.TraceId), SpanID: hex.EncodeToString(sp.SpanId),
					ParentSpanID: hex.EncodeToString(sp.ParentSpanId), Name: sp.Name,
					Node: res["service.instance.id"], Service: res["service.name"], Attributes: attrs})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	return nil
}

// Spans returns the spans received so far of trace traceID (hex), or all
// with "".
func (r *Receiver) Spans(traceID string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if traceID == "" || s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}
