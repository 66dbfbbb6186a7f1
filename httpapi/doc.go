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
//	/v1/tags…                          the admin API (admin.go), admin token only
//	/v1/tokens…                        the token admin API (tokens.go), admin token only
//
// Access (auth.go): the ID routes are open or need a bearer token whose
// scope covers the tag (AuthConfig.IDs); the admin routes always need an
// admin token; the monitoring routes are open unless protected, when a
// browser logs in at /id/login into a signed session of a monitor token
// (login.go, session.go). Limits (limits.go) bound query and body sizes,
// read times, IDs per second per token or client address, range requests
// (database writes) per second per token or address, and login attempts
// per minute per address. Routes added beside these that hand out IDs
// wrap themselves in Server.IDAccess, call Server.AuthorizeTag once they
// know their tag, and answer errors with Server.WriteError.
//
// IDs are JSON strings because JavaScript numbers lose integers above 2^53;
// send "Accept: text/plain" to /id to get the bare decimal number instead.
//
// Errors are JSON, {"error":{"code":"unknown_tag","message":"…"}}, with a
// stable code: 400 for bad input, 404 for an unknown tag, 503 with
// Retry-After when no ID can be handed out. Every error maps to its status,
// code and Retry-After in one table (errorTable in errors.go, rendered in
// docs/errors.md).
//
//	srv := httpapi.NewServer(httpapi.Config{Allocator: a})
//	http.ListenAndServe(":8080", srv)
package httpapi
