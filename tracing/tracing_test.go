package tracing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/tracing"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	validParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// What a caller sends as traceparent: the valid forms are taken, anything
// else is ignored (no trace, no error), however it is malformed.
func TestContextFromTheWire(t *testing.T) {
	for _, tc := range []struct {
		name, parent, state string
		want                bool
	}{
		{"sampled", validParent, "", true},
		{"with tracestate", validParent, "vendor=abc,other=1", true},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", true},
		{"empty", "", "", false},
		{"all-zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false},
		{"all-zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", false},
		{"upper case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "", false},
		{"short", "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01", "", false},
		{"trailing junk", validParent + "-zz", "", false},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01", "", false},
		{"huge", strings.Repeat("0", 1<<20), "", false},
		{"huge tracestate", validParent, strings.Repeat("k=v,", 1<<16), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tracing.Context{Traceparent: tc.parent, Tracestate: tc.state}
			sc := trace.SpanContextFromContext(c.With(context.Background()))
			if sc.IsValid() != tc.want {
				t.Fatalf("valid = %v, want %v", sc.IsValid(), tc.want)
			}
			if !tc.want {
				return
			}
			if !sc.IsRemote() {
				t.Fatal("a caller's span context is not marked remote")
			}
			back := tracing.ContextOf(c.With(context.Background()))
			if back.Traceparent != tc.parent {
				t.Fatalf("round trip: %q, want %q", back.Traceparent, tc.parent)
			}
			if len(back.Tracestate) > 4096 {
				t.Fatalf("tracestate kept %d bytes of a hostile header", len(back.Tracestate))
			}
			h := http.Header{}
			h.Set("Traceparent", tc.parent)
			if tc.state != "" {
				h.Set("Tracestate", tc.state)
			}
			if got := trace.SpanContextFromContext(tracing.FromHTTP(context.Background(), h)); !got.Equal(sc) {
				t.Fatalf("from HTTP: %v, want %v", got, sc)
			}
			out := http.Header{}
			propagation.TraceContext{}.Inject(c.With(context.Background()), propagation.HeaderCarrier(out))
			if out.Get("Traceparent") != tc.parent {
				t.Fatalf("to HTTP: %q", out.Get("Traceparent"))
			}
		})
	}
}

// A sampled span's context survives the log extension; an unsampled one
// is not written; what is not the extension's form is ignored.
func TestLogExtension(t *testing.T) {
	sampled := tracing.Context{Traceparent: validParent}.With(context.Background())
	ext := tracing.LogExtension(sampled)
	if len(ext) != 26 {
		t.Fatalf("extension of %d bytes", len(ext))
	}
	ctx, ok := tracing.FromLogExtension(context.Background(), ext)
	if !ok || !trace.SpanContextFromContext(ctx).Equal(trace.SpanContextFromContext(sampled)) {
		t.Fatalf("round trip: %v %v", ok, trace.SpanContextFromContext(ctx))
	}
	unsampled := tracing.Context{Traceparent: strings.TrimSuffix(validParent, "01") + "00"}.With(context.Background())
	if ext := tracing.LogExtension(unsampled); ext != nil {
		t.Fatalf("an unsampled write carries %x into the log", ext)
	}
	if ext := tracing.LogExtension(context.Background()); ext != nil {
		t.Fatalf("an untraced write carries %x into the log", ext)
	}
	for name, bad := range map[string][]byte{
		"nil":          nil,
		"short":        ext[:25],
		"long":         append(append([]byte{}, ext...), 0),
		"unknown form": append([]byte{0x02}, ext[1:]...),
		"zero ids":     append([]byte{0x01}, make([]byte, 25)...),
	} {
		if _, ok := tracing.FromLogExtension(context.Background(), bad); ok {
			t.Errorf("%s: %x taken as a trace", name, bad)
		}
	}
}

func FuzzFromLogExtension(f *testing.F) {
	f.Add(tracing.LogExtension(tracing.Context{Traceparent: validParent}.With(context.Background())))
	f.Add([]byte{0x01})
	f.Fuzz(func(t *testing.T, ext []byte) {
		ctx, ok := tracing.FromLogExtension(context.Background(), ext)
		if ok && !trace.SpanContextFromContext(ctx).IsValid() {
			t.Fatal("an invalid span context taken")
		}
		if ok && string(tracing.LogExtension(ctx)) != string(ext) && trace.SpanContextFromContext(ctx).IsSampled() {
			t.Fatalf("%x re-encodes as %x", ext, tracing.LogExtension(ctx))
		}
	})
}

// Tracing off costs no allocation on the paths every request takes: a
// nil Tracer's spans, reading a request's context for the RPC header and
// the log.
func TestTracingOffAllocatesNothing(t *testing.T) {
	var off *tracing.Tracer
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		c, span := off.Start(ctx, "x", trace.SpanKindServer)
		c, child := off.StartChild(c, "y", trace.SpanKindInternal)
		if span.IsRecording() || child.IsRecording() {
			t.Fatal("a span records with tracing off")
		}
		if tracing.ContextOf(c).Traceparent != "" || tracing.LogExtension(c) != nil {
			t.Fatal("an untraced request carries a trace")
		}
		child.End()
		span.End()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per request with tracing off", allocs)
	}
}

// StartChild starts nothing under a context without a trace (an RPC no
// traced request made), and a child of the caller's span otherwise.
func TestStartChildOnlyContinuesATrace(t *testing.T) {
	tr, exp := recording(t)
	_, span := tr.StartChild(context.Background(), "orphan", trace.SpanKindServer)
	span.End()
	ctx := tracing.Context{Traceparent: validParent}.With(context.Background())
	_, span = tr.StartChild(ctx, "child", trace.SpanKindServer)
	span.End()
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "child" || spans[0].Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("spans: %+v", spans)
	}
}

// Published keeps the last PublishedKept traced entries and forgets the
// older ones; unsampled entries are never kept.
func TestPublishedIsBounded(t *testing.T) {
	tr, _ := recording(t)
	p := tracing.NewPublished()
	sampled := tracing.Context{Traceparent: validParent}.With(context.Background())
	unsampled := tracing.Context{Traceparent: strings.TrimSuffix(validParent, "01") + "00"}.With(context.Background())
	p.Record(unsampled, 1, time.Now())
	for i := uint64(2); i < 2+tracing.PublishedKept+10; i++ {
		p.Record(sampled, i, time.Now())
	}
	for _, tc := range []struct {
		index uint64
		want  bool
	}{{1, false}, {2, false}, {11, false}, {12, true}, {1 + tracing.PublishedKept + 10, true}, {3 + tracing.PublishedKept + 10, false}} {
		span, ok := tr.StartDelivery(p, tc.index)
		span.End()
		if ok != tc.want {
			t.Errorf("index %d remembered: %v, want %v", tc.index, ok, tc.want)
		}
	}
	var off *tracing.Tracer
	if _, ok := off.StartDelivery(p, 12); ok {
		t.Error("a delivery span with tracing off")
	}
}

// recording is a Tracer that records every span it is asked for into the
// returned in-memory exporter, until the test ends.
func recording(t *testing.T) (*tracing.Tracer, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tracing.New(tp, nil), exp
}
