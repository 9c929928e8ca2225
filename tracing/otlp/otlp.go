// Package otlp turns an agent's tracing flags into a tracing.Tracer that
// sends spans over OTLP/HTTP with OpenTelemetry's SDK: the part of tracing
// that only the command needs (the other packages use the API alone, so
// that importing them does not bring in the SDK).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/plugreg/plugreg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Config says where a node's spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL (as
	// OTEL_EXPORTER_OTLP_ENDPOINT: spans go to its /v1/traces). Empty:
	// the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT environment variable if either is set,
	// else tracing is off.
	Endpoint string
	// SampleRate is the share (0 to 1) of requests without a sampled
	// caller that start a trace here. A request whose traceparent says
	// sampled is always traced, one that says not sampled never: the
	// caller decides, as etcd and Kubernetes do (both default to 0).
	SampleRate float64
	// Node, Role and Version describe this agent in every span's
	// resource (service.instance.id, plugreg.role, service.version).
	Node, Role, Version string
}

// Enabled reports whether cfg turns tracing on. OTEL_SDK_DISABLED=true
// turns it off whatever else says (the OpenTelemetry specification's
// switch, which the Go SDK does not read itself: its issue 3559).
func (cfg Config) Enabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return cfg.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// batchEnv are the batch span processor's variables the SDK reads and
// trusts: a negative size panics in NewTracerProvider (open upstream as
// opentelemetry-go issue 9001, in v1.47.0), so plugreg checks them first.
var batchEnv = []string{"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT"}

// Validate checks what the exporter would otherwise ignore silently (an
// endpoint that does not parse keeps its default, localhost).
func (cfg Config) Validate() error {
	if cfg.SampleRate < 0 || cfg.SampleRate > 1 || math.IsNaN(cfg.SampleRate) {
		return fmt.Errorf("trace sample rate %v: want a share between 0 and 1", cfg.SampleRate)
	}
	if cfg.Enabled() {
		for _, name := range batchEnv {
			v := os.Getenv(name)
			if v == "" { // unset, as the SDK reads it
				continue
			}
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n <= 0 {
				return fmt.Errorf("%s=%q: want a positive whole number", name, v)
			}
		}
	}
	if cfg.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		return fmt.Errorf("trace endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("trace endpoint %q: want an OTLP/HTTP URL such as http://collector:4318", cfg.Endpoint)
	}
	return nil
}

// Setup returns the Tracer cfg asks for, exporting over OTLP/HTTP in
// batches, or nil (tracing off) when cfg does not turn it on. Shutdown
// flushes what is queued.
//
// The exporter reads the standard OTEL_EXPORTER_OTLP_* variables for
// what the flags do not say (headers, certificates, compression,
// timeout); OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME add to or
// override the resource. Spans queue in memory (the SDK's 2,048) and are
// dropped, never waited for, while the collector is unreachable: a write
// is never slowed by its trace.
func Setup(cfg Config) (*tracing.Tracer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		u, _ := url.Parse(cfg.Endpoint) // validated
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	// New only configures: it does not dial, so a collector that is down
	// at start is not an error (spans wait in the queue for it).
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(context.Background(),
		resource.WithAttributes(
			attribute.String("service.name", "plugreg"),
			attribute.String("service.instance.id", cfg.Node),
			attribute.String("service.version", cfg.Version),
			attribute.String("plugreg.role", cfg.Role),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRate))),
	)
	return tracing.New(tp, tp.Shutdown), nil
}
