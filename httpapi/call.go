package httpapi

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5/middleware"
)

// Call is one call that reaches the server by another transport than its
// HTTP port (rpcapi's grpc-go listener), given what serve gives every HTTP
// request: a request ID, a bounded wait, the request metrics by route and
// the access log.
type Call struct {
	rc     requestContext
	remote string
}

// NewCall begins a call made under ctx from the address remote. Its
// request ID is requestID when the caller sent one (its x-request-id, as
// X-Request-Id on HTTP), else the server's next; middleware.GetReqID reads
// it from Context. End it with End.
func (s *Server) NewCall(ctx context.Context, requestID, remote string) *Call {
	c := &Call{remote: remote}
	c.rc = requestContext{
		Context: ctx,
		srv:     s,
		start:   s.cfg.Now(),
		seq:     s.requestSeq.Add(1),
		prefix:  s.requestPrefix,
	}
	if requestID != "" {
		c.rc.header = http.Header{middleware.RequestIDHeader: {requestID}}
	}
	return c
}

// Context is the call's context: ctx's values, the request ID, and ctx's
// deadline or the server's request timeout, whichever comes first.
func (c *Call) Context() context.Context { return &c.rc }

// RequestID is the call's request ID.
func (c *Call) RequestID() string { return c.rc.requestID() }

// End records the call as a request of route answered with status (the
// HTTP status its outcome has on the HTTP port) in idmint_http_requests_total
// and idmint_http_request_duration_seconds, logs it with --access-log, and
// stops the wait's timer if one was started.
func (c *Call) End(route string, status int) {
	s := c.rc.srv
	c.rc.finish()
	elapsed := s.cfg.Now().Sub(c.rc.start)
	s.cfg.Metrics.route(route).observe(status, elapsed)
	if s.cfg.AccessLog {
		s.cfg.Logger.Info("grpc", "procedure", truncate(route, maxLogged), "status", status,
			"duration", elapsed, "remote", c.remote, "request_id", c.rc.requestID())
	}
}

// EffectiveLimits returns the limits the server applies: Config.Limits with
// its defaults filled in (the header and idle bounds another listener of
// the same API follows).
func (s *Server) EffectiveLimits() Limits { return s.cfg.Limits }
