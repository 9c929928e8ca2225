package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A traced write's spans on a server (Config.Tracer; docs/operations.md,
// Tracing): "plugreg.forward" on a follower that sends it to the leader,
// "rpc <method>" where an internal RPC of a trace arrives, "raft.apply"
// on the leader from proposal to commit and its own apply,
// "plugreg.wait_applied" on the server that answers until its own FSM has
// it, and on every server "fsm.apply" with "registry.publish" (the
// events handed to this server's watchers) under it, joined to the
// write's trace by the entry's log extension (tracing.LogExtension); and
// "events.deliver" under that for each HTTP event stream that writes the
// event (httpapi, through Backend.EventTraces).

// startApply starts the apply spans of the traced entries of a batch, and
// keeps them for publish (the journal, called back by the FSM within
// ApplyBatch, on raft's FSM goroutine, the machine's only caller). Nil
// (tracing off): nothing.
func (p *applyTracer) startApply(logs []*raft.Log) []trace.Span {
	if p == nil {
		return nil
	}
	var spans []trace.Span
	for _, l := range logs {
		ctx, ok := tracing.FromLogExtension(context.Background(), l.Extensions)
		if !ok {
			continue
		}
		ctx, span := p.tracer.Start(ctx, "fsm.apply", trace.SpanKindInternal)
		if span.IsRecording() {
			span.SetAttributes(attribute.Int64("raft.index", int64(l.Index)), attribute.Int("plugreg.batch_size", len(logs)))
		}
		spans = append(spans, span)
		p.batch = append(p.batch, tracedEntry{index: l.Index, ctx: ctx})
	}
	return spans
}

// endApply ends the spans startApply started, once the batch is applied.
func (p *applyTracer) endApply(spans []trace.Span) {
	if p == nil {
		return
	}
	p.batch = p.batch[:0]
	for _, span := range spans {
		span.End()
	}
}

// applyTracer starts a traced write's spans on this server while
// tracing is on: "fsm.apply" (the machine's startApply) and, under it,
// "registry.publish" around the journal's publish of the batch
// (publishing, the journal's OnApplied).
type applyTracer struct {
	tracer *tracing.Tracer
	hub    func() *registry.Hub
	batch  []tracedEntry // the batch's traced entries
	// published: the traced entries' publish spans, for the event
	// streams' delivery spans (httpapi; Backend.EventTraces)
	published *tracing.Published
}

// tracedEntry is a traced entry of the batch being applied: its index
// and its fsm.apply span's context.
type tracedEntry struct {
	index uint64
	ctx   context.Context
}

// publishing starts the publish spans of the batch's traced entries and
// returns what ends them once the journal has published it.
func (p *applyTracer) publishing(_ *fsm.State, events []fsm.Event) func() {
	if len(p.batch) == 0 {
		return nil
	}
	spans := make([]trace.Span, len(p.batch))
	now := time.Now()
	for i, e := range p.batch {
		var ctx context.Context
		ctx, spans[i] = p.tracer.Start(e.ctx, "registry.publish", trace.SpanKindInternal)
		// Before the journal has them: a stream may write them at once.
		p.published.Record(ctx, e.index, now)
	}
	return func() {
		var watchers int64
		if h := p.hub(); h != nil {
			watchers = h.Watchers()
		}
		for _, span := range spans {
			if span.IsRecording() {
				span.SetAttributes(attribute.Int("plugreg.events", len(events)), attribute.Int64("plugreg.watchers", watchers))
			}
			span.End()
		}
	}
}
