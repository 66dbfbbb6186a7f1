package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/internal/faillog"
	"github.com/idmint/idmint/token"
)

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
	// LeafRoutes serves Leaf's routes, GET /api/segment/get/{key} and
	// /api/snowflake/get/{key}, with Leaf's plain-text replies (leaf.go).
	LeafRoutes bool
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
	// Region, when set, is this instance's region: /id/health, /metrics and
	// the dashboard show it (docs/regions.md).
	Region core.RegionSource
	// RPC, when set, adds routes of another protocol to the router, after
	// idmint's own: rpcapi.Service serves gRPC, gRPC-Web and Connect on
	// them. Its routes get what every route gets (request ID, bounded
	// wait, recovery, metrics by route).
	RPC Mounter
}

// Mounter adds routes of another protocol to the router, over the same
// core: rpcapi.Service is one.
type Mounter interface {
	Mount(c *core.Core, r chi.Router)
}

// Server is the HTTP API: an adapter of the core (decode, call, encode).
// It is an http.Handler.
//
// Every request gets, before the router: a request ID (chi's
// middleware.GetReqID and core.RequestID read it), a bounded wait
// (RequestTimeout), panic recovery into a JSON 500, and per-route metrics
// by chi pattern; routes mounted on Router get them too.
type Server struct {
	cfg    Config
	core   *core.Core
	router *chi.Mux

	exchanges     sync.Pool // *exchange
	requestSeq    atomic.Uint64
	requestPrefix string
}

// NewServer returns the API over cfg.Allocator.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// 5xx lines at most once a second per code.
	cfg.Logger = slog.New(faillog.New(cfg.Logger.Handler(), cfg.Now))
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	m := cfg.Metrics
	refused := m.refusedCounter()
	c := core.New(core.Config{
		Allocator: cfg.Allocator, Instance: cfg.Instance, Tags: cfg.Tags, MaxCount: cfg.MaxCount,
		RequestTimeout: cfg.RequestTimeout, PingTimeout: cfg.PingTimeout, Replication: cfg.Replication,
		Snowflake: cfg.Snowflake, Auth: cfg.Auth, Limits: cfg.Limits, Admin: cfg.Admin, TokenAdmin: cfg.TokenAdmin,
		TLS: cfg.TLS, Region: cfg.Region, Logger: cfg.Logger, Now: cfg.Now,
		OnRefused: func(code string) { refused.WithLabelValues(code).Inc() },
		OnFloor:   m.observeFloor,
		OnCall:    func(name string, status int, elapsed time.Duration) { m.route(name).observe(status, elapsed) },
	})
	// The settings with the core's defaults filled in.
	cc := c.Config()
	cfg.MaxCount, cfg.RequestTimeout, cfg.PingTimeout, cfg.Auth, cfg.Limits = cc.MaxCount, cc.RequestTimeout, cc.PingTimeout, cc.Auth, cc.Limits
	m.attach(cfg.Allocator, cfg.PingTimeout, cfg.Replication)
	if cfg.Region != nil {
		m.reg.MustRegister(newRegionCollector(cfg.Region, cfg.Allocator))
	}
	s := &Server{cfg: cfg, core: c, requestPrefix: requestPrefix()}
	s.exchanges.New = func() any { return new(exchange) }
	s.router = s.routes()
	return s
}

// Core returns the core the server adapts: another transport (rpcapi)
// serves the same operations, with the same access control and limits,
// over it.
func (s *Server) Core() *core.Core { return s.core }

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
