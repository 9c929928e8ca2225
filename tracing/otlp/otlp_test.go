package otlp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/tests/framework/otlptest"
	"github.com/plugreg/plugreg/tracing"
	"github.com/plugreg/plugreg/tracing/otlp"
	"go.opentelemetry.io/otel/trace"
)

const (
	validParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
)

func TestSetupValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  otlp.Config
		env  map[string]string
		want string // in the error; "" none
		on   bool
	}{
		{name: "off by default", cfg: otlp.Config{}},
		{name: "endpoint", cfg: otlp.Config{Endpoint: "http://127.0.0.1:4318"}, on: true},
		{name: "endpoint from the environment", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "OTEL_SDK_DISABLED wins", cfg: otlp.Config{Endpoint: "http://127.0.0.1:4318"}, env: map[string]string{"OTEL_SDK_DISABLED": "TRUE"}},
		{name: "no scheme", cfg: otlp.Config{Endpoint: "collector:4318"}, want: "want an OTLP/HTTP URL"},
		{name: "grpc scheme", cfg: otlp.Config{Endpoint: "grpc://collector:4317"}, want: "want an OTLP/HTTP URL"},
		{name: "rate above 1", cfg: otlp.Config{SampleRate: 1.5}, want: "between 0 and 1"},
		{name: "negative rate", cfg: otlp.Config{SampleRate: -0.1}, want: "between 0 and 1"},
		// The SDK panics on these (opentelemetry-go issue 9001).
		{name: "negative queue", cfg: otlp.Config{Endpoint: "http://127.0.0.1:4318"}, env: map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, want: "OTEL_BSP_MAX_QUEUE_SIZE"},
		{name: "negative batch", cfg: otlp.Config{Endpoint: "http://127.0.0.1:4318"}, env: map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "-5"}, want: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"},
		{name: "queue not a number", cfg: otlp.Config{Endpoint: "http://127.0.0.1:4318"}, env: map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "many"}, want: "OTEL_BSP_MAX_QUEUE_SIZE"},
		{name: "batch variables unread with tracing off", env: map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"} {
				t.Setenv(k, "")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tr, err := otlp.Setup(tc.cfg)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tr != nil) != tc.on {
				t.Fatalf("tracing on = %v, want %v", tr != nil, tc.on)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Setup's exporter sends spans over OTLP/HTTP to the endpoint's
// /v1/traces with the agent's resource, and Shutdown flushes them.
func TestSetupExportsOverOTLP(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME"} {
		t.Setenv(k, "")
	}
	rcv := otlptest.Start(t)
	tr, err := otlp.Setup(otlp.Config{Endpoint: rcv.URL, Node: "node-a", Role: "server", Version: "v9"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := tracing.Context{Traceparent: validParent}.With(context.Background())
	_, span := tr.Start(ctx, "write", trace.SpanKindServer)
	span.End()
	// Not sampled by the caller, and the rate is 0: not recorded.
	_, span = tr.Start(context.Background(), "untraced", trace.SpanKindServer)
	span.End()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	got := rcv.Spans("")
	if len(got) != 1 {
		t.Fatalf("received %+v, want the one sampled span", got)
	}
	s := got[0]
	if s.TraceID != traceID || s.ParentSpanID != "00f067aa0ba902b7" || s.Name != "write" || s.Node != "node-a" || s.Service != "plugreg" {
		t.Fatalf("received %+v", s)
	}
}
