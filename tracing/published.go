package tracing

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Published remembers, for the last traced log entries a node applied,
// the span under which their events were handed to the node's watchers
// and when: an event stream that then writes one of those events to its
// client records the delivery as a span of the write's trace, starting
// at the publish (so it shows the wait in the stream's queue too). Only
// sampled entries are remembered, the last PublishedKept of them; older
// ones are delivered untraced.
type Published struct {
	mu    sync.Mutex
	byIdx map[uint64]published
	order [PublishedKept]uint64 // a ring of the remembered indexes
	next  int
}

// PublishedKept bounds what Published remembers.
const PublishedKept = 4096

type published struct {
	sc trace.SpanContext
	at time.Time
}

// NewPublished returns an empty table.
func NewPublished() *Published { return &Published{byIdx: make(map[uint64]published)} }

// Record remembers that the events of entry index were published under
// ctx's span at at.
func (p *Published) Record(ctx context.Context, index uint64, at time.Time) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byIdx[index]; ok {
		return
	}
	if old := p.order[p.next]; old != 0 {
		delete(p.byIdx, old)
	}
	p.order[p.next] = index
	p.next = (p.next + 1) % PublishedKept
	p.byIdx[index] = published{sc: sc, at: at}
}

// StartDelivery starts the delivery span of an event of entry index,
// under its publish span and from the publish time, when the entry was
// traced; ok is false otherwise (the span is then not started).
func (t *Tracer) StartDelivery(p *Published, index uint64) (span trace.Span, ok bool) {
	if t == nil || p == nil {
		return noSpan, false
	}
	p.mu.Lock()
	pub, ok := p.byIdx[index]
	p.mu.Unlock()
	if !ok {
		return noSpan, false
	}
	ctx := trace.ContextWithSpanContext(context.Background(), pub.sc)
	_, span = t.tracer.Start(ctx, "events.deliver", trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(pub.at))
	return span, true
}
