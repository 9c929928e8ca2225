// Package otlptest is an OTLP/HTTP trace receiver for tests: what a
// collector (Jaeger, Tempo, the OpenTelemetry Collector) is to a plugreg
// agent's exporter, on loopback, keeping every span it is sent.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

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

// Receiver serves POST /v1/traces (protobuf, plain or gzip) until the
// test ends.
type Receiver struct {
	URL string // base URL: http://127.0.0.1:port

	mu    sync.Mutex
	spans []Span
	posts int
}

// Start starts a receiver; t's cleanup stops it.
func Start(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{URL: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serve)
	srv := &http.Server{Handler: mux}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, fmt.Sprintf("not an ExportTraceServiceRequest: %v", err), http.StatusBadRequest)
		return
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
	r.posts++
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Write(out)
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
