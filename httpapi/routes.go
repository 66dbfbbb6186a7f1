package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/wire"
)

// routes mounts every route of the HTTP API, in one place, top to bottom:
// each is an adapter of one core operation (decode, call, encode), or a
// page for browsers and scrapers. Every route gets what serve does around
// the router (request ID, bounded wait, recovery, metrics by its pattern);
// limitRequest caps query and body sizes before any handler reads them.
func (s *Server) routes() *chi.Mux {
	c := s.core
	r := chi.NewRouter()
	r.Use(s.limitRequest)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.WriteError(w, r, errNotFound(r))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.WriteError(w, r, errMethod(r, " not allowed on this route"))
	})

	// IDs (core: NextID, NextIDs), the hot path.
	r.Get("/id", s.handleID)
	r.Get("/ids", s.handleIDs)
	// Ranges and give-backs (core: GrantRange, GiveBack).
	r.Route(wire.PathSegments, func(r chi.Router) {
		r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
			// Behind the ID routes' access control, as the routes are.
			if _, err := c.Authorize(r.Context(), callerOf(r), core.AccessIDs); err != nil {
				s.WriteError(w, r, err)
				return
			}
			s.WriteError(w, r, errMethod(r, " not allowed; use POST"))
		})
		r.Post("/", s.handleGrant)
		r.Post("/giveback", s.handleGiveBack)
	})
	// Snowflake (core: NextSnowflake, NextSnowflakes, ParseSnowflake).
	if c.SnowflakeOn() {
		r.Get("/snowflake", s.handleSnowflake)
		r.Get("/snowflakes", s.handleSnowflakes)
		r.Get("/snowflake/parse", s.handleSnowflakeParse)
		s.cfg.Metrics.reg.MustRegister(newSnowflakeCollector(s.cfg.Snowflake))
	}
	// Leaf's routes (core: NextID, NextSnowflake), for callers written for
	// Leaf (leaf.go).
	if s.cfg.LeafRoutes {
		r.Get(leafSegmentPath, s.handleLeafSegment)
		if c.SnowflakeOn() {
			r.Get(leafSnowflakePath, s.handleLeafSnowflake)
		}
	}
	// Admin (core: the tag, token and standby operations).
	if c.AdminOn() {
		r.Get("/v1/tags", s.handleListTags)
		r.Post("/v1/tags", s.handleCreateTag)
		r.Get("/v1/tags/{biz_tag}", s.handleGetTag)
		r.Patch("/v1/tags/{biz_tag}", s.handleUpdateTag)
		r.Post("/v1/tags/{biz_tag}/bump", s.handleBumpTag)
	}
	if c.TokensOn() {
		r.Get("/v1/tokens", s.handleListTokens)
		r.Post("/v1/tokens", s.handleCreateToken)
		r.Delete("/v1/tokens/{id}", s.handleRevokeToken)
	}
	if c.StandbysOn() {
		r.Get("/v1/standbys", s.handleListStandbys)
		r.Delete("/v1/standbys/{name}", s.handleForgetStandby)
	}
	// Monitoring (core: Health), and what is no operation: liveness, the
	// dashboard and its login, metrics, the document.
	r.Method(http.MethodGet, "/id/health", s.monitoringAuth(http.HandlerFunc(s.handleHealth), cookieToo))
	r.Get("/id/live", handleLive)
	r.Method(http.MethodGet, "/id/dashboard", s.monitoringAuth(http.HandlerFunc(handleDashboard), cookiePage))
	s.mountLogin(r)
	r.Method(http.MethodGet, "/metrics", s.monitoringAuth(s.cfg.Metrics.handler(), bearerOnly))
	r.Get("/openapi.yaml", handleOpenAPI)
	// Another protocol over the same core (rpcapi: gRPC, gRPC-Web,
	// Connect).
	if s.cfg.RPC != nil {
		s.cfg.RPC.Mount(c, r)
	}
	return r
}

func errNotFound(r *http.Request) error {
	return newError(wire.CodeNotFound, "no such endpoint: "+truncate(r.URL.Path, maxLogged)+endpointHint)
}

func errMethod(r *http.Request, what string) error {
	return newError(wire.CodeMethod, "method "+truncate(r.Method, 16)+what)
}
