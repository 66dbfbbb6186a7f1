package httpapi

import (
	"crypto/rand"
	"encoding/base32"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/wire"
)

// What every request goes through, in Server.ServeHTTP, before and after the
// router: a request ID, a bound on the time it may wait, panic recovery,
// the per-route metrics and the access log. It is written for the hot path
// (GET /id answers in microseconds): nothing here starts a timer, formats a
// string or takes a lock unless the request needs it.

// exchange is the server's per-request state that dies with the request:
// the response recorder and chi's routing context. Exchanges are pooled.
type exchange struct {
	rec   recorder
	route chi.Context
}

// serve runs one request through the router.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	ex := s.exchanges.Get().(*exchange)
	ex.rec = recorder{ResponseWriter: w}
	ex.route.Reset()
	ex.route.Routes = s.router
	start := s.cfg.Now()
	rc := &requestContext{
		route:  &ex.route,
		header: r.Header,
		seq:    s.requestSeq.Add(1),
		prefix: s.requestPrefix,
	}
	s.core.Bound(&rc.Bounded, r.Context(), start)
	// One WithContext for everything: chi finds its routing context in rc
	// and does not make its own.
	r = r.WithContext(rc)
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.cfg.Logger.Error("panic serving request", "path", truncate(r.URL.Path, maxLogged), "panic", v,
				"request_id", rc.requestID(), "stack", string(stack()))
			s.WriteError(&ex.rec, r, newError(wire.CodeInternal, "internal error"))
		}
		rc.Finish()
		elapsed := s.cfg.Now().Sub(start)
		status := ex.rec.statusCode()
		s.cfg.Metrics.route(ex.route.RoutePattern()).observe(status, elapsed)
		if s.cfg.AccessLog {
			s.cfg.Logger.Info("http",
				"method", truncate(r.Method, 16), "path", truncate(r.URL.Path, maxLogged), "query", truncate(r.URL.RawQuery, maxLogged),
				"status", status, "bytes", ex.rec.bytes,
				"duration", elapsed, "remote", r.RemoteAddr,
				"request_id", rc.requestID())
		}
		ex.rec = recorder{}
		s.exchanges.Put(ex)
	}()
	s.router.ServeHTTP(&ex.rec, r)
}

// requestContext is a request's context. It answers chi's routing context
// and the request ID (chi's middleware.GetReqID and core.RequestID work on
// it), and it bounds the request's time lazily (core.Bounded): the timer
// behind Done exists only once something waits on it, which a request
// served from memory never does.
type requestContext struct {
	core.Bounded // the server's context: cancelled when the client goes away
	route        *chi.Context
	header       http.Header
	seq          uint64
	prefix       string
}

// Value implements context.Context.
func (c *requestContext) Value(key any) any {
	switch key {
	case chi.RouteCtxKey:
		return c.route
	case middleware.RequestIDKey, core.RequestIDKey:
		return c.requestID()
	}
	return c.Bounded.Value(key)
}

// requestID is the request's X-Request-Id header, or else a name made of
// the server's prefix and the request's sequence number, as chi's
// middleware.RequestID makes them. It is only formatted when asked for.
func (c *requestContext) requestID() string {
	if id := c.header.Get(middleware.RequestIDHeader); id != "" {
		return id
	}
	return c.prefix + "-" + strconv.FormatUint(c.seq, 10)
}

// requestPrefix returns "host/random": unique enough across restarts and
// instances to tell their requests apart in logs.
func requestPrefix() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "idmint"
	}
	var buf [12]byte
	rand.Read(buf[:])
	enc := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(buf[:])
	return host + "/" + strings.ToLower(enc[:10])
}

// recorder remembers the status and size of a response.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

// WriteHeader implements http.ResponseWriter.
func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Flush implements http.Flusher, which streaming RPCs (gRPC reflection)
// need to send each message as it is written.
func (w *recorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusCode is the status sent, 200 when the handler wrote nothing.
func (w *recorder) statusCode() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
