// Package httpapi serves idmint over HTTP with chi:
//
//	GET /id?biz_tag=order              {"biz_tag":"order","id":"1001"}
//	GET /ids?biz_tag=order&count=3     {"biz_tag":"order","ids":["1002","1003","1004"]}
//	GET /id/health[?biz_tag=order]     status for dashboards and load balancers
//	GET /id/live                       200 while the process answers (liveness; no database, no token)
//	GET /id/dashboard                  a live web page over /id/health
//	GET /metrics                       Prometheus metrics (see Metrics)
//	POST /v1/segments                  a whole range for a caller-chosen request_id (see wire.SegmentRequest)
//	POST /v1/segments/giveback         the unused tail of such a range (see wire.GiveBackRequest)
//	GET /openapi.yaml                  the OpenAPI 3 document of every route
//	/v1/tags…, /v1/tokens…, /v1/standbys…  the admin API (admin.go), admin token only
//
// The server is an adapter of the core (package core): every route is
// mounted in routes.go, and each decodes its request, calls the core
// operation, and encodes the reply. Access control and limits are the
// core's: the ID routes are open or need a bearer token whose scope covers
// the tag (AuthConfig.IDs); the admin routes always need an admin token;
// the monitoring routes are open unless protected, when a browser logs in
// at /id/login into a signed session of a monitor token (login.go,
// session.go: the HTTP side). Limits bound query and body sizes, read
// times (limits.go: the HTTP side), IDs per second per token or client
// address, range requests (database writes) per second per token or
// address, and login attempts per minute per address. Routes added beside
// these that hand out IDs
// wrap themselves in Server.IDAccess, call Server.AuthorizeTag once they
// know their tag, and answer errors with Server.WriteError.
//
// IDs are JSON strings because JavaScript numbers lose integers above 2^53;
// send "Accept: text/plain" to /id to get the bare decimal number instead.
//
// Errors are JSON, {"error":{"code":"unknown_tag","message":"…"}}, with a
// stable code: 400 for bad input, 404 for an unknown tag, 503 with
// Retry-After when no ID can be handed out. Every error has its row of
// core.Rules (its code, Retry-After and message); httpStatus in errors.go
// is the status of each code (both rendered in docs/errors.md).
//
//	srv := httpapi.NewServer(httpapi.Config{Allocator: a})
//	http.ListenAndServe(":8080", srv)
package httpapi
