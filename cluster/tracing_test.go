package cluster_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"github.com/plugreg/plugreg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedNodes gives every agent of a test cluster its own tracer (its
// node ID in the resource, as a real agent's), all recording into one
// in-memory exporter; only what callers sampled is recorded.
type tracedNodes struct {
	exp *tracetest.InMemoryExporter
	mu  sync.Mutex
	tps []*sdktrace.TracerProvider
}

func (tn *tracedNodes) tracer(node string) *tracing.Tracer {
	return tn.sampling(node, sdktrace.NeverSample())
}

// sampling is tracer, with root the sampler of requests without a
// caller's trace (the agent's -trace-sample-rate).
func (tn *tracedNodes) sampling(node string, root sdktrace.Sampler) *tracing.Tracer {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tn.exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.instance.id", node))),
		sdktrace.WithSampler(sdktrace.ParentBased(root)))
	tn.mu.Lock()
	tn.tps = append(tn.tps, tp)
	tn.mu.Unlock()
	return tracing.New(tp, nil)
}

// callerTrace returns a context as a caller's instrumented code holds it:
// a sampled span of its own, remote to plugreg, under a fresh trace.
func callerTrace() (context.Context, trace.SpanContext) {
	var cfg trace.SpanContextConfig
	rand.Read(cfg.TraceID[:])
	rand.Read(cfg.SpanID[:])
	cfg.TraceFlags = trace.FlagsSampled
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	return trace.ContextWithRemoteSpanContext(context.Background(), sc), sc
}

// tracingHTTP sends the request context's span as traceparent, as an
// instrumented caller's HTTP client does (otelhttp's transport).
var tracingHTTP = &http.Client{Transport: propagatingTransport{}, Timeout: 30 * time.Second}

type propagatingTransport struct{}

func (propagatingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return http.DefaultTransport.RoundTrip(r)
}

// spanOf is one recorded span in the terms the checks use.
type spanOf struct {
	name, node   string
	id, parentID trace.SpanID
}

func (tn *tracedNodes) trace(id trace.TraceID) []spanOf {
	var out []spanOf
	for _, s := range tn.exp.GetSpans() {
		if s.SpanContext.TraceID() != id {
			continue
		}
		node, _ := s.Resource.Set().Value("service.instance.id")
		out = append(out, spanOf{name: s.Name, node: node.AsString(), id: s.SpanContext.SpanID(), parentID: s.Parent.SpanID()})
	}
	return out
}

// connected reports whether every span of a trace hangs from the caller's
// span through spans of the trace (one tree, no orphan; else orphan names
// one), and returns the names recorded on each node. A trace is exported
// span by span as each ends, so a poll may see a child before its parent
// (registry.publish ends inside fsm.apply): an orphan fails a test only
// if it stays one.
func connected(spans []spanOf, caller trace.SpanID) (byNode map[string][]string, orphan string) {
	ids := map[trace.SpanID]bool{caller: true}
	for _, s := range spans {
		ids[s.id] = true
	}
	byNode = map[string][]string{}
	for _, s := range spans {
		if !ids[s.parentID] {
			orphan = fmt.Sprintf("span %s on %s has parent %s, which is not in the trace: %+v", s.name, s.node, s.parentID, spans)
		}
		byNode[s.node] = append(byNode[s.node], s.name)
	}
	return byNode, orphan
}

// has reports whether names holds every one of want.
func has(names []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(names, w) {
			return false
		}
	}
	return true
}

// One write is one trace across the cluster: from the caller's
// traceparent through the HTTP API of the agent it called, the forward to
// the leader, raft, and every server's apply and publish (joined by the
// entry's log extension), to the wait for the answering server's own
// apply. Through a follower, the leader, and a client agent; and writes
// forwarded together in one batch each keep their own trace. A write
// nobody traced records nothing.
func TestOneWriteIsOneTraceAcrossNodes(t *testing.T) {
	tn := &tracedNodes{exp: tracetest.NewInMemoryExporter()}
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(i int, cfg *cluster.Config) {
		cfg.Tracer = tn.tracer(cfg.NodeID)
	}})
	defer c.Shutdown()
	defer func() {
		for _, tp := range tn.tps {
			tp.Shutdown(context.Background())
		}
	}()
	cn := c.AddClient(func(cfg *agent.Config) { cfg.Tracer = tn.tracer(cfg.NodeID) })
	leader := c.WaitForLeader()
	follower := c.Followers()[0]
	c.Eventually(10*time.Second, "client agent sees a server", func() bool { return len(cn.Client.Servers()) > 0 })

	// A watcher on every server: each delivers the write's event to it
	// in a span of the write's trace.
	streams, stopStreams := context.WithCancel(context.Background())
	defer stopStreams()
	var reading sync.WaitGroup
	defer reading.Wait()
	defer stopStreams()
	for _, n := range c.Nodes {
		req, _ := http.NewRequestWithContext(streams, http.MethodGet, n.HTTPURL+"/v1/events?type=csi", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		reading.Add(1)
		go func() {
			defer reading.Done()
			defer resp.Body.Close()
			io.Copy(io.Discard, resp.Body)
		}()
	}
	everyServerApplies := func(byNode map[string][]string) bool {
		for _, n := range c.Nodes {
			if !has(byNode[n.Config.NodeID], "fsm.apply", "registry.publish", "events.deliver") {
				return false
			}
		}
		return true
	}
	for _, tc := range []struct {
		name string
		url  string
		// what the agent the caller talked to records, and the leader
		via, atLeader []string
		viaNode       string
	}{
		{"through a follower", follower.HTTPURL, []string{"POST /v1/plugins", "plugreg.forward", "plugreg.wait_applied"}, []string{"rpc Apply", "raft.apply"}, follower.Config.NodeID},
		{"through the leader", leader.HTTPURL, []string{"POST /v1/plugins", "raft.apply", "plugreg.wait_applied"}, []string{"raft.apply"}, leader.Config.NodeID},
		{"through a client agent", cn.HTTPURL, []string{"POST /v1/plugins", "rpc Agent.Register"}, []string{"raft.apply"}, cn.Config.NodeID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := client.New(client.Config{Addrs: []string{tc.url}, HTTPClient: tracingHTTP})
			if err != nil {
				t.Fatal(err)
			}
			ctx, caller := callerTrace()
			if _, err := cl.Register(ctx, plugin("traced", tc.name)); err != nil {
				t.Fatal(err)
			}
			var byNode map[string][]string
			c.Eventually(10*time.Second, "every server's apply recorded in one tree", func() bool {
				var orphan string
				byNode, orphan = connected(tn.trace(caller.TraceID()), caller.SpanID())
				return orphan == "" && everyServerApplies(byNode)
			})
			if !has(byNode[tc.viaNode], tc.via...) {
				t.Errorf("%s recorded %v, want %v", tc.viaNode, byNode[tc.viaNode], tc.via)
			}
			if !has(byNode[leader.Config.NodeID], tc.atLeader...) {
				t.Errorf("the leader recorded %v, want %v", byNode[leader.Config.NodeID], tc.atLeader)
			}
			if len(byNode) < 2 {
				t.Errorf("one write traced on %d node(s): %v", len(byNode), byNode)
			}
		})
	}

	t.Run("forwarded in one batch", func(t *testing.T) {
		cl, err := client.New(client.Config{Addrs: []string{follower.HTTPURL}, HTTPClient: tracingHTTP})
		if err != nil {
			t.Fatal(err)
		}
		before := follower.ForwardStats().Batches
		var callers []trace.SpanContext
		for round := 0; round < 10 && follower.ForwardStats().Batches == before; round++ {
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for i := range 32 {
				ctx, caller := callerTrace()
				callers = append(callers, caller)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := cl.Register(ctx, plugin("batched", fmt.Sprintf("r%d-%d", round, i))); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		}
		if follower.ForwardStats().Batches == before {
			t.Fatal("no write was forwarded in a batch")
		}
		for _, caller := range callers {
			c.Eventually(10*time.Second, "every server's apply recorded in one tree", func() bool {
				byNode, orphan := connected(tn.trace(caller.TraceID()), caller.SpanID())
				return orphan == "" && everyServerApplies(byNode) && has(byNode[leader.Config.NodeID], "raft.apply") &&
					has(byNode[follower.Config.NodeID], "plugreg.forward")
			})
		}
	})

	// A client agent's own write (its host's plugins: no caller) starts a
	// trace at the agent's sample rate, here every time.
	t.Run("a client agent's own write", func(t *testing.T) {
		tn.exp.Reset()
		host := c.AddClient(func(cfg *agent.Config) { cfg.Tracer = tn.sampling(cfg.NodeID, sdktrace.AlwaysSample()) })
		c.Eventually(10*time.Second, "the agent sees a server", func() bool { return len(host.Client.Servers()) > 0 })
		if _, err := host.Client.Register(context.Background(), plugin("hosted", "h1")); err != nil {
			t.Fatal(err)
		}
		var root *spanOf
		for _, s := range tn.exp.GetSpans() {
			if s.Name == "rpc Agent.Register" && !s.Parent.IsValid() {
				node, _ := s.Resource.Set().Value("service.instance.id")
				root = &spanOf{name: s.Name, node: node.AsString(), id: s.SpanContext.SpanID()}
				c.Eventually(10*time.Second, "every server's apply recorded in one tree", func() bool {
					byNode, orphan := connected(tn.trace(s.SpanContext.TraceID()), trace.SpanID{})
					return orphan == "" && everyServerApplies(byNode)
				})
			}
		}
		if root == nil || root.node != host.Config.NodeID {
			t.Fatalf("no trace begun by %s's own write: %+v", host.Config.NodeID, root)
		}
	})

	t.Run("untraced", func(t *testing.T) {
		tn.exp.Reset()
		cl, err := client.New(client.Config{Addrs: []string{follower.HTTPURL}, HTTPClient: tracingHTTP})
		if err != nil {
			t.Fatal(err)
		}
		res, err := cl.Register(context.Background(), plugin("untraced", "u1"))
		if err != nil {
			t.Fatal(err)
		}
		c.Eventually(10*time.Second, "every server applied it", func() bool {
			for _, n := range c.Nodes {
				if n.AppliedIndex() < res.Index {
					return false
				}
			}
			return true
		})
		if spans := tn.exp.GetSpans(); len(spans) != 0 {
			t.Fatalf("an untraced write recorded %d spans: %v", len(spans), spans[0].Name)
		}
	})
}
