package tracing

import (
	"net/http"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HTTP returns h with one server span per request, the child of the
// caller's trace when its traceparent header names one. The span is named
// by the route routes matches ("GET /id", never the raw path or its query),
// or by the procedure for gRPC and Connect calls on the port
// ("idmint.v1.IDService/NextID"); it carries the method, the route and
// the status, and nothing else of the request. A watched route (a probe,
// a scrape, the dashboard's poll) is traced only in a caller's sampled
// trace.
func (t *Tracing) HTTP(h http.Handler, routes chi.Routes) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := httpStates.Get().(*httpState)
		defer func() {
			st.sw = statusWriter{}
			httpStates.Put(st)
		}()
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		route := routeOf(routes, r, &st.route)
		if unasked(ctx, route) {
			h.ServeHTTP(w, r)
			return
		}
		method := methodOf(r.Method)
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
		name := method
		if service, proc, ok := procedureOf(route); ok {
			name = strings.TrimPrefix(route, "/")
			opts = append(opts, trace.WithAttributes(keyRPCSystem.String(rpcSystemOf(r)), keyRPCService.String(service), keyRPCMethod.String(proc)))
		} else if route != "" {
			name = method + " " + route
			opts = append(opts, trace.WithAttributes(keyMethod.String(method), keyRoute.String(route)))
		} else {
			opts = append(opts, trace.WithAttributes(keyMethod.String(method)))
		}
		ctx, span := t.tracer.Start(ctx, name, opts...)
		defer span.End()
		st.sw = statusWriter{ResponseWriter: w}
		sw := &st.sw
		h.ServeHTTP(sw, r.WithContext(ctx))
		status := sw.statusCode()
		span.SetAttributes(keyStatus.Int(status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	})
}

// httpState is what HTTP needs per request, pooled: the status writer
// (which net/http lets nobody use once the handler returned) and the
// routing context it matches the route with.
type httpState struct {
	sw    statusWriter
	route chi.Context
}

var httpStates = sync.Pool{New: func() any { return new(httpState) }}

// routeOf is the pattern of the route r takes, "" when none does; rctx is
// the routing context to match it with.
func routeOf(routes chi.Routes, r *http.Request, rctx *chi.Context) string {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	rctx.Reset()
	if !routes.Match(rctx, r.Method, path) {
		return ""
	}
	return rctx.RoutePattern()
}

// procedureOf splits a route that is a gRPC procedure,
// "/package.Service/Method", into its service and method.
func procedureOf(route string) (service, method string, ok bool) {
	service, method, ok = strings.Cut(strings.TrimPrefix(route, "/"), "/")
	if !ok || !strings.HasPrefix(route, "/") || !strings.Contains(service, ".") || method == "" ||
		strings.ContainsAny(method, "/{*") {
		return "", "", false
	}
	return service, method, true
}

// rpcSystemOf tells gRPC (and gRPC-Web) from Connect by the content type.
func rpcSystemOf(r *http.Request) string {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		return "grpc"
	}
	return "connect_rpc"
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher, which streaming calls need.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
