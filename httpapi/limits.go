package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/wire"
)

// The limits are the core's (core.Limits); this file keeps their HTTP
// side: the server's timeouts and header cap, and the query and body caps
// checked before anything reads them.

// HTTPServer returns an http.Server for s with the timeouts and header cap
// of its Limits. Its ErrorLog is the caller's to set.
func (s *Server) HTTPServer() *http.Server {
	l := s.cfg.Limits
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// limitRequest refuses a query or a declared body over the limits, before
// anything reads them. It costs two comparisons.
func (s *Server) limitRequest(next http.Handler) http.Handler {
	maxQuery, maxBody := s.cfg.Limits.MaxQueryBytes, s.cfg.Limits.MaxBodyBytes
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.RawQuery) > maxQuery {
			s.WriteError(w, r, newError(wire.CodeQueryTooLong, "query string too long"))
			return
		}
		if r.ContentLength > maxBody {
			s.WriteError(w, r, newError(wire.CodeBodyTooLarge, "request body too large"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusedCounter returns idmint_http_refused_total, registering it on
// first use.
func (m *Metrics) refusedCounter() *prometheus.CounterVec {
	m.refusedOnce.Do(func() {
		m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idmint_http_refused_total",
			Help: "Requests refused by access control or a limit, by error code (unauthorized, forbidden, rate_limited, query_too_long, body_too_large).",
		}, []string{"code"})
		for _, rule := range core.Rules {
			if rule.Refusal {
				m.refused.WithLabelValues(rule.Code)
			}
		}
		m.reg.MustRegister(m.refused)
	})
	return m.refused
}
