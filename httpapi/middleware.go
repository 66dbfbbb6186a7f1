package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
		Context: r.Context(),
		srv:     s,
		start:   start,
		route:   &ex.route,
		header:  r.Header,
		seq:     s.requestSeq.Add(1),
		prefix:  s.requestPrefix,
	}
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
		rc.finish()
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
// it), and it bounds the request's time lazily: the deadline is known from
// the start, but the timer behind Done exists only once something waits on
// it, which a request served from memory never does.
type requestContext struct {
	context.Context // the server's: cancelled when the client goes away
	srv             *Server
	start           time.Time // when the request came
	// deadline is start plus the server's request timeout at the round
	// trip of the moment, worked out on first use (deadlineOnce): most
	// requests are served from memory and never ask.
	deadlineOnce sync.Once
	deadline     time.Time
	route        *chi.Context
	header       http.Header
	seq          uint64
	prefix       string

	once    sync.Once
	made    atomic.Bool     // set once bounded is made
	bounded context.Context // Context with the deadline, made by bound
	cancel  context.CancelFunc
}

// Deadline implements context.Context.
func (c *requestContext) Deadline() (time.Time, bool) {
	own := c.ownDeadline()
	if d, ok := c.Context.Deadline(); ok && d.Before(own) {
		return d, true
	}
	return own, true
}

// ownDeadline returns the request's deadline, working it out once.
func (c *requestContext) ownDeadline() time.Time {
	c.deadlineOnce.Do(func() { c.deadline = c.start.Add(c.srv.requestTimeout()) })
	return c.deadline
}

// Done implements context.Context; the first call starts the timer.
func (c *requestContext) Done() <-chan struct{} { return c.bound().Done() }

// Err implements context.Context.
func (c *requestContext) Err() error { return c.bound().Err() }

// Value implements context.Context.
func (c *requestContext) Value(key any) any {
	switch key {
	case chi.RouteCtxKey:
		return c.route
	case middleware.RequestIDKey, core.RequestIDKey:
		return c.requestID()
	}
	// Once the bounded context exists, keys of the context package itself
	// (how a child finds its parent's cancellation) must see it.
	if c.made.Load() {
		return c.bounded.Value(key)
	}
	return c.Context.Value(key)
}

// bound returns the request's context with its deadline, making it on first
// use. After finish it is the server's context, which net/http cancels once
// the request is done.
func (c *requestContext) bound() context.Context {
	c.once.Do(func() {
		c.bounded, c.cancel = context.WithDeadline(c.Context, c.ownDeadline())
		c.made.Store(true)
	})
	if c.bounded == nil {
		return c.Context
	}
	return c.bounded
}

// finish stops the timer, if one was started.
func (c *requestContext) finish() {
	c.once.Do(func() {})
	if c.cancel != nil {
		c.cancel()
	}
}

// requestTimeout bounds one request: RequestTimeout, or as long as one
// store call may take at the database's round trip when that is more (a
// cold tag's first fetch, a range grant, an admin call to a database a WAN
// away), as the allocator's own waits follow it.
func (s *Server) requestTimeout() time.Duration {
	return s.core.RequestTimeout()
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
