package tracing

import (
	"context"
	"strings"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// GRPC starts the server span of a call of procedure
// ("/idmint.v1.IDService/NextID") on the grpc-go listener, the child of
// the caller's trace when its metadata carries a traceparent, and returns
// the call's context and the function that ends the span with the call's
// code. It is rpcapi.GRPCConfig's Trace. The span carries the procedure
// and the code, nothing of the metadata. A health check is traced only in
// a caller's sampled trace (watched).
func (t *Tracing) GRPC(ctx context.Context, procedure string, md metadata.MD) (context.Context, func(codes.Code)) {
	ctx = t.prop.Extract(ctx, mdCarrier(md))
	if unasked(ctx, procedure) {
		return ctx, func(codes.Code) {}
	}
	name := strings.TrimPrefix(procedure, "/")
	service, method, _ := strings.Cut(name, "/")
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(keyRPCSystem.String("grpc"), keyRPCService.String(service), keyRPCMethod.String(method)))
	return ctx, func(c codes.Code) {
		span.SetAttributes(keyGRPCCode.Int(int(c)))
		if serverFault(c) {
			span.SetStatus(otelcodes.Error, c.String())
		}
		span.End()
	}
}

// watched are the routes and procedures that probes, scrapers and the
// dashboard call every few seconds, each pod all day: a span of its own
// for each would bury the traces of IDs. They are traced when the caller
// asks, in a sampled trace of its own.
var watched = map[string]bool{
	"/id/live": true, "/id/health": true, "/id/dashboard": true, "/metrics": true,
	"/grpc.health.v1.Health/Check": true, "/grpc.health.v1.Health/Watch": true,
}

// unasked reports whether route is watched and ctx carries no sampled
// trace of the caller's.
func unasked(ctx context.Context, route string) bool {
	return watched[route] && !trace.SpanContextFromContext(ctx).IsSampled()
}

// serverFault reports the codes that mark a server span an error, as
// OpenTelemetry's conventions for RPC servers list them.
func serverFault(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// mdCarrier reads and writes a call's metadata for the propagator.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
