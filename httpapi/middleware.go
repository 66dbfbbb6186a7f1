package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"
)

// recoverer turns a panic into a JSON 500 and a log line with the stack; the
// client never sees the panic.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.cfg.Logger.Error("panic serving request", "path", truncate(r.URL.Path, maxLogged), "panic", v,
					"request_id", middleware.GetReqID(r.Context()), "stack", string(stack()))
				writeError(w, r, s.cfg.Logger, &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// timeout bounds every request's context; handlers turn an expired context
// into a 503.
func timeout(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// accessLog logs one structured line per request.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.cfg.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		s.cfg.Logger.Info("http",
			"method", r.Method, "path", truncate(r.URL.Path, maxLogged), "query", truncate(r.URL.RawQuery, maxLogged),
			"status", ww.Status(), "bytes", ww.BytesWritten(),
			"duration", s.cfg.Now().Sub(start), "remote", r.RemoteAddr,
			"request_id", middleware.GetReqID(r.Context()))
	})
}
