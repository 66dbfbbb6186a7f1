package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation names idmint's tracer.
const instrumentation = "github.com/idmint/idmint"

// Tracing makes idmint's spans with one tracer provider and propagates
// trace context with the W3C tracecontext and baggage formats. A nil
// *Tracing is tracing off: nothing is wrapped.
type Tracing struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	shutdown func(context.Context) error
}

// New returns a Tracing over tp, for a program that embeds idmint and
// owns its provider (Shutdown then does nothing: the provider is the
// program's to shut down).
func New(tp trace.TracerProvider) *Tracing {
	return &Tracing{
		tracer:   tp.Tracer(instrumentation),
		prop:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		shutdown: func(context.Context) error { return nil },
	}
}

// Enabled reports what the OTEL_* environment read by getenv asks for:
// traces are on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset
// and an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn them off. Any other exporter is an
// error: idmint exports OTLP only.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER %q: want otlp or none", truncate(exp))
	}
}

// protocol is the OTLP protocol the environment asks for:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
// else http/protobuf (the specification's default).
func protocol(getenv func(string) string) (string, error) {
	p := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if p == "" {
		p = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", truncate(p))
}

// FromEnv returns the Tracing the OTEL_* environment read by getenv asks
// for (see Enabled), or nil when traces are off. The exporter reads its
// own variables (endpoint, headers, timeout, compression, certificates),
// the provider its sampler (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG;
// default parentbased_always_on) and batching (OTEL_BSP_*), the resource
// OTEL_SERVICE_NAME (default "idmint") and OTEL_RESOURCE_ATTRIBUTES.
// Export errors go to logger. Shutdown flushes what is buffered.
func FromEnv(ctx context.Context, getenv func(string) string, version string, logger *slog.Logger) (*Tracing, error) {
	on, err := Enabled(getenv)
	if err != nil || !on {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	proto, err := protocol(getenv)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if proto == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter (%s): %w", proto, err)
	}
	// Later detectors win: the environment names the service over the
	// default.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "idmint"), attribute.String("service.version", version)),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing: span export failed", "err", err)
	}))
	t := New(tp)
	t.shutdown = tp.Shutdown
	logger.Info("tracing on", "protocol", proto, "sampler", samplerName(getenv))
	return t, nil
}

// samplerName is the sampler the environment names, for the start line.
func samplerName(getenv func(string) string) string {
	if s := getenv("OTEL_TRACES_SAMPLER"); s != "" {
		return truncate(s)
	}
	return "parentbased_always_on"
}

// Shutdown flushes the spans still buffered to the exporter, within ctx,
// and stops the provider FromEnv made.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.shutdown(ctx) }

// Propagator returns the propagator the Tracing extracts callers' trace
// context with: W3C tracecontext and baggage.
func (t *Tracing) Propagator() propagation.TextMapPropagator { return t.prop }

// truncate bounds a value of the environment quoted in an error.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
