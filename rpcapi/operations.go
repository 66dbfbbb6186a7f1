package rpcapi

import (
	"net/http"

	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// operation is one procedure and the HTTP route it runs: its method, its
// path pattern in openapi.yaml, and the access control it sits behind
// (checked once before the call's message is read, and again by the
// route).
type operation struct {
	procedure string
	method    string
	path      string
	access    httpapi.Access
}

// operations maps every procedure to its HTTP operation. A procedure is
// served only when the server has its route (the Snowflake procedures with
// --snowflake, the admin ones with an admin store). The test against
// openapi.yaml fails when either side has an operation the other lacks.
var operations = []operation{
	{idmintv1connect.IDServiceNextIDProcedure, http.MethodGet, "/id", httpapi.AccessIDs},
	{idmintv1connect.IDServiceNextIDsProcedure, http.MethodGet, "/ids", httpapi.AccessIDs},
	{idmintv1connect.SegmentServiceGrantRangeProcedure, http.MethodPost, "/v1/segments", httpapi.AccessIDs},
	{idmintv1connect.SegmentServiceGiveBackProcedure, http.MethodPost, "/v1/segments/giveback", httpapi.AccessIDs},
	{idmintv1connect.SnowflakeServiceNextSnowflakeProcedure, http.MethodGet, "/snowflake", httpapi.AccessIDs},
	{idmintv1connect.SnowflakeServiceNextSnowflakesProcedure, http.MethodGet, "/snowflakes", httpapi.AccessIDs},
	{idmintv1connect.SnowflakeServiceParseSnowflakeProcedure, http.MethodGet, "/snowflake/parse", httpapi.AccessOpen},
	{idmintv1connect.AdminServiceListTagsProcedure, http.MethodGet, "/v1/tags", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceCreateTagProcedure, http.MethodPost, "/v1/tags", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceGetTagProcedure, http.MethodGet, "/v1/tags/{biz_tag}", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceUpdateTagProcedure, http.MethodPatch, "/v1/tags/{biz_tag}", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceBumpTagProcedure, http.MethodPost, "/v1/tags/{biz_tag}/bump", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceListTokensProcedure, http.MethodGet, "/v1/tokens", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceCreateTokenProcedure, http.MethodPost, "/v1/tokens", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceRevokeTokenProcedure, http.MethodDelete, "/v1/tokens/{id}", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceListStandbysProcedure, http.MethodGet, "/v1/standbys", httpapi.AccessAdmin},
	{idmintv1connect.AdminServiceForgetStandbyProcedure, http.MethodDelete, "/v1/standbys/{name}", httpapi.AccessAdmin},
}

// notOperations are the HTTP routes that are no procedure: /id/health is
// the standard health service; the others are for browsers and scrapers.
var notOperations = map[string]string{
	"GET /id/health":    "grpc.health.v1.Health/Check",
	"GET /id/live":      "liveness for HTTP probes: it asks nothing of the core",
	"GET /id/dashboard": "a web page",
	"GET /metrics":      "Prometheus",
	"GET /openapi.yaml": "the OpenAPI document; reflection describes the RPCs",
	"GET /id/login":     "the dashboard's login form, for browsers",
	"POST /id/login":    "the dashboard's login, for browsers",
	"POST /id/logout":   "the dashboard's logout, for browsers",
}
