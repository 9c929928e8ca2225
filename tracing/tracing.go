// Package tracing follows a request through plugreg with OpenTelemetry:
// the spans a node records and the W3C trace context it accepts and passes
// on (HTTP headers, the internal RPC's header, raft log entries). The
// OTLP exporter that sends spans is package tracing/otlp's.
//
// Tracing off is a nil *Tracer, and costs nothing on the hot path: Start
// returns the context it was given and a span that records nothing,
// without allocating, and nothing is read from or written to requests.
// The OpenTelemetry SDK (rather than a tracer of our own) because it is
// what collectors, Jaeger and Tempo speak, and its sampler, batching and
// exporter are the well-kept parts a tracer needs; plugreg only decides
// where spans begin and how their context crosses its own wires. This
// package uses OpenTelemetry's API only; the SDK and the exporter are
// package otlp's, which only the command imports.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of plugreg's spans.
const ScopeName = "github.com/plugreg/plugreg"

// Tracer starts plugreg's spans. A nil *Tracer is tracing off.
type Tracer struct {
	tracer   trace.Tracer
	shutdown func(context.Context) error // nil when the provider is the caller's
}

// New returns a Tracer recording through tp whose Shutdown calls shutdown
// (package otlp's, which owns its provider); nil shutdown: the caller owns
// tp and shuts it down (a test's provider with an in-memory exporter, say).
func New(tp trace.TracerProvider, shutdown func(context.Context) error) *Tracer {
	return &Tracer{tracer: tp.Tracer(ScopeName), shutdown: shutdown}
}

// Shutdown flushes the spans still queued and stops the exporter; a nil
// Tracer, or one over the caller's provider, has nothing to do.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// noSpan records nothing (OpenTelemetry's no-op span, a value without
// fields: returning it does not allocate).
var noSpan = trace.SpanFromContext(context.Background())

// Start begins a span named name under ctx's span (local or remote).
// Attributes are set by the caller after checking span.IsRecording(),
// so that building them costs nothing when the span is not sampled.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

// StartChild is Start, but only under a span ctx already has: a request
// that arrived without a trace does not start one here. The internal
// RPCs use it, so that only the traces callers began cross them.
func (t *Tracer) StartChild(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if t == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

// End records err (if any) on span as its error status and ends it.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// propagator reads and writes W3C traceparent and tracestate; it refuses
// (ignores) malformed values, so a hostile header starts a fresh trace or
// none, never an error.
var propagator = propagation.TraceContext{}

// FromHTTP returns ctx with the remote span context that h's traceparent
// and tracestate headers carry, if they carry a valid one.
func FromHTTP(ctx context.Context, h http.Header) context.Context {
	if h.Get("Traceparent") == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Context is a span context in its W3C text form, as the internal RPC
// carries it (msgpack: older peers ignore the fields).
type Context struct {
	Traceparent string `codec:",omitempty"`
	Tracestate  string `codec:",omitempty"`
}

// ContextOf returns ctx's span context in text form, as the propagator
// writes it for HTTP; zero when it has none.
func ContextOf(ctx context.Context) Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return Context{}
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return Context{Traceparent: c["traceparent"], Tracestate: c["tracestate"]}
}

// With returns ctx with c as its remote parent; ctx unchanged when c is
// zero or malformed.
func (c Context) With(ctx context.Context) context.Context {
	if c.Traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": c.Traceparent}
	if c.Tracestate != "" {
		carrier["tracestate"] = c.Tracestate
	}
	return propagator.Extract(ctx, carrier)
}
