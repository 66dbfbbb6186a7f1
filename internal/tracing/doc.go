// Package tracing gives idmint OpenTelemetry traces: off unless the
// standard OTEL_* environment asks for them, exported over OTLP (HTTP or
// gRPC), with W3C tracecontext and baggage propagation.
//
//	tr, err := tracing.FromEnv(ctx, os.Getenv, version)
//	if tr != nil { // nil: off, nothing is traced and nothing costs
//		defer tr.Shutdown(ctx) // flushes the spans still buffered
//		handler = tr.HTTP(handler, router)
//		store = tr.Store(store)
//	}
//
// Every span is made here, and carries only the attributes this package
// names (attrs.go): a tag, a request ID, a range, a worker ID, a route or a
// procedure, a status. Never a header, a query string, a holder key, a
// token or anything of the database's connection; an error is told by its
// class, never by its text (a driver's error may name the database's host
// and user).
package tracing
