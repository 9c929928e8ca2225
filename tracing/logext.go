package tracing

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// A raft log entry carries the trace of the write that proposed it in its
// Extensions (raft stores and replicates them with the entry, and hands
// them to every server's FSM): each server's apply of a traced write is a
// span of that write's trace. Only sampled writes carry one, so the log
// of an untraced cluster is what it always was; servers of older
// releases ignore Extensions. The trace state is left out: it is for the
// caller's vendors, not for every server's copy of the log.
//
// Encoding: one byte naming the form (logExtTrace), the trace ID (16),
// the span ID (8), the trace flags (1). Anything else is ignored.

const (
	logExtTrace    = 0x01
	logExtTraceLen = 1 + 16 + 8 + 1
)

// LogExtension returns the Extensions for an entry proposed under ctx:
// nil unless ctx's span is sampled.
func LogExtension(ctx context.Context) []byte {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return nil
	}
	b := make([]byte, logExtTraceLen)
	b[0] = logExtTrace
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(b[1:17], tid[:])
	copy(b[17:25], sid[:])
	b[25] = byte(sc.TraceFlags())
	return b
}

// FromLogExtension returns ctx with the span context an entry's
// Extensions carry as its remote parent, and whether they carried one.
// Extensions it does not know, or malformed, are ignored: the log is
// written by leaders, but a newer release may put something else there.
func FromLogExtension(ctx context.Context, ext []byte) (context.Context, bool) {
	if len(ext) != logExtTraceLen || ext[0] != logExtTrace {
		return ctx, false
	}
	var cfg trace.SpanContextConfig
	copy(cfg.TraceID[:], ext[1:17])
	copy(cfg.SpanID[:], ext[17:25])
	cfg.TraceFlags = trace.TraceFlags(ext[25]) & trace.FlagsSampled
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return ctx, false
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc), true
}
