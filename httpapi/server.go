package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/time/rate"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/ratelimit"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// Allocator is what the API needs from an allocator.Allocator.
type Allocator interface {
	Next(ctx context.Context, tag string) (int64, error)
	NextRanges(ctx context.Context, tag string, n int, dst []segment.Range) ([]segment.Range, error)
	Stats() []segment.Stats
	TagStats(ctx context.Context, tag string) (segment.Stats, error)
	Ping(ctx context.Context) error
	// SegmentGranter serves the range endpoints, /v1/segments.
	SegmentGranter
	// RoundTrip and Timeout: the database's measured round trip, and
	// timeouts that follow it (allocator.RoundTrip).
	RoundTrip() allocator.RoundTripStatus
	Timeout(floor time.Duration) time.Duration
}

var _ Allocator = (*allocator.Allocator)(nil)

// Config configures a Server. Zero fields take the defaults named.
type Config struct {
	Allocator Allocator
	// Instance names this process in /id/health.
	Instance string
	// Tags are listed in /id/health from the start, with their state, even
	// before this instance first loads them (idmint serve --tag): without
	// them a new instance lists no tag until one is asked for.
	Tags []string
	// MaxCount bounds count in /ids (default 1000).
	MaxCount int
	// RequestTimeout bounds the time a request may wait, for a segment or
	// the database (default 5s). The timer starts only when the request
	// waits: one served from memory never makes one.
	RequestTimeout time.Duration
	// PingTimeout bounds the database check of /id/health (default 1s).
	PingTimeout time.Duration
	// AccessLog logs one line per request (default off: at tens of
	// thousands of requests per second the log costs more than the ID).
	AccessLog bool
	// Replication, when set, reports the database's standbys in
	// /id/health, /metrics and the dashboard (a *postgres.Store is
	// one); nil for a database without replication, such as SQLite.
	Replication ReplicationSource
	// Metrics is served at /metrics. Nil makes a new one, whose segment
	// load histogram stays empty: for it, pass Metrics.ObserveLoad as the
	// allocator's segment.Config.OnLoad.
	Metrics *Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	// Snowflake serves /snowflake, /snowflakes and /snowflake/parse, and
	// adds its state to /id/health and /metrics; nil leaves them out.
	Snowflake Snowflake

	// Auth controls who may ask for IDs, read the monitoring routes and
	// use the admin API (auth.go).
	Auth AuthConfig
	// Limits bounds what one client can cost (limits.go).
	Limits Limits
	// Admin, when set, serves the admin API under /v1/tags (admin.go).
	Admin TagAdmin
	// TokenAdmin, when set, serves the token admin API under /v1/tokens
	// (tokens.go): the store Auth.Tokens reads; every allocator.Store is
	// one.
	TokenAdmin token.Store
	// TLS is what /id/health says of the listener; the listener itself is
	// the caller's (idmint serve --tls-cert).
	TLS TLSHealth
	// RPC, when set, adds routes of another protocol to the router, after
	// idmint's own: rpcapi.Service serves gRPC, gRPC-Web and Connect on
	// them. Its routes get what every route gets (request ID, bounded
	// wait, recovery, metrics by route).
	RPC Mounter
}

// Mounter adds routes to the router of s; rpcapi.Service is one.
type Mounter interface {
	Mount(s *Server, r chi.Router)
}

// Server is the HTTP API. It is an http.Handler.
//
// Every request gets, before the router: a request ID (chi's
// middleware.GetReqID reads it), a bounded wait (RequestTimeout), panic
// recovery into a JSON 500, and per-route metrics by chi pattern; routes
// mounted on Router get them too.
type Server struct {
	cfg    Config
	router *chi.Mux

	exchanges     sync.Pool // *exchange
	requestSeq    atomic.Uint64
	requestPrefix string

	// auth checks bearer tokens; addrLimits is nil unless per-address
	// limits are set, rangeLimits unless range requests are limited,
	// loginLimits unless login attempts are; leadLimits bounds the leads
	// of claimed floors (always).
	auth        *authenticator
	addrLimits  *addrLimits
	rangeLimits *principalLimits[*rate.Limiter]
	leadLimits  *principalLimits[*ratelimit.Bucket]
	loginLimits *loginLimits
}

// NewServer returns the API over cfg.Allocator.
func NewServer(cfg Config) *Server {
	if cfg.MaxCount <= 0 {
		cfg.MaxCount = 1000
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// 5xx lines at most once a second per code (failureLog).
	cfg.Logger = slog.New(newFailureLog(cfg.Logger.Handler(), cfg.Now))
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	cfg.Metrics.attach(cfg.Allocator, cfg.PingTimeout, cfg.Replication)
	cfg.Limits.setDefaults(cfg.RequestTimeout)
	s := &Server{cfg: cfg, requestPrefix: requestPrefix()}
	s.exchanges.New = func() any { return new(exchange) }
	s.initAccess()
	s.rangeLimits = newRangeLimits(s.cfg.Limits, s.cfg.Auth.IDs)
	s.leadLimits = newLeadLimits(s.cfg.Limits, s.cfg.Auth.IDs)
	r := chi.NewRouter()
	// What serve does around the router (request ID, bounded wait,
	// recovery, metrics) applies to every route; this caps query and body
	// sizes before any handler reads them.
	r.Use(s.limitRequest)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.WriteError(w, r, requestError(wire.CodeNotFound, "no such endpoint: "+truncate(r.URL.Path, maxLogged)+endpointHint))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.WriteError(w, r, requestError(wire.CodeMethod, "method "+truncate(r.Method, 16)+" not allowed on this route"))
	})
	// Every route gets what serve does around the router (request ID,
	// bounded wait, recovery, metrics by its pattern); middleware for some
	// routes only goes in with r.With, r.Group or a wrapping handler.
	r.Method(http.MethodGet, "/id", s.IDAccess(http.HandlerFunc(s.handleID)))
	r.Method(http.MethodGet, "/ids", s.IDAccess(http.HandlerFunc(s.handleIDs)))
	r.Method(http.MethodGet, "/id/health", s.monitoringAuth(http.HandlerFunc(s.handleHealth), cookieToo))
	r.Get("/id/live", handleLive)
	r.Method(http.MethodGet, "/id/dashboard", s.monitoringAuth(http.HandlerFunc(handleDashboard), cookiePage))
	s.mountLogin(r)
	r.Method(http.MethodGet, "/metrics", s.monitoring(cfg.Metrics.handler()))
	r.Get("/openapi.yaml", handleOpenAPI)
	s.mountAdmin(r)
	s.mountTokens(r)
	s.mountStandbys(r)
	if cfg.Snowflake != nil {
		s.mountSnowflake(r)
	}
	// Ranges are IDs: the ID routes' access control, and the token's
	// scope checked against the body's tag (AuthorizeTag); the ID limits
	// charged by the handlers, by the IDs granted.
	r.Mount("/v1/segments", s.idAccess(s.segmentsRouter(cfg.Allocator), false))
	if cfg.RPC != nil {
		cfg.RPC.Mount(s, r)
	}
	s.router = r
	return s
}

// endpointHint ends the 404 of an unknown path (GET / among them): where
// a newcomer finds what the server offers.
const endpointHint = "; see /id/dashboard (the live view), /id/health (health as JSON) and /openapi.yaml (every route)"

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r) }

// Router returns the chi router, so that a program can mount more routes.
func (s *Server) Router() chi.Router { return s.router }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
