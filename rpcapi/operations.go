package rpcapi

import (
	"net/http"

	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// operation is one procedure and the HTTP route it runs: its method and
// its path pattern in openapi.yaml.
type operation struct {
	procedure string
	method    string
	path      string
}

// operations maps every procedure to its HTTP operation. A procedure is
// served only when the server has its route (the Snowflake procedures with
// --snowflake, the admin ones with an admin store). The test against
// openapi.yaml fails when either side has an operation the other lacks.
var operations = []operation{
	{idmintv1connect.IDServiceNextIDProcedure, http.MethodGet, "/id"},
	{idmintv1connect.IDServiceNextIDsProcedure, http.MethodGet, "/ids"},
	{idmintv1connect.SegmentServiceGrantRangeProcedure, http.MethodPost, "/v1/segments"},
	{idmintv1connect.SegmentServiceGiveBackProcedure, http.MethodPost, "/v1/segments/giveback"},
	{idmintv1connect.SnowflakeServiceNextSnowflakeProcedure, http.MethodGet, "/snowflake"},
	{idmintv1connect.SnowflakeServiceNextSnowflakesProcedure, http.MethodGet, "/snowflakes"},
	{idmintv1connect.SnowflakeServiceParseSnowflakeProcedure, http.MethodGet, "/snowflake/parse"},
	{idmintv1connect.AdminServiceListTagsProcedure, http.MethodGet, "/v1/tags"},
	{idmintv1connect.AdminServiceCreateTagProcedure, http.MethodPost, "/v1/tags"},
	{idmintv1connect.AdminServiceGetTagProcedure, http.MethodGet, "/v1/tags/{biz_tag}"},
	{idmintv1connect.AdminServiceUpdateTagProcedure, http.MethodPatch, "/v1/tags/{biz_tag}"},
	{idmintv1connect.AdminServiceBumpTagProcedure, http.MethodPost, "/v1/tags/{biz_tag}/bump"},
	{idmintv1connect.AdminServiceListTokensProcedure, http.MethodGet, "/v1/tokens"},
	{idmintv1connect.AdminServiceCreateTokenProcedure, http.MethodPost, "/v1/tokens"},
	{idmintv1connect.AdminServiceRevokeTokenProcedure, http.MethodDelete, "/v1/tokens/{id}"},
	{idmintv1connect.AdminServiceListStandbysProcedure, http.MethodGet, "/v1/standbys"},
	{idmintv1connect.AdminServiceForgetStandbyProcedure, http.MethodDelete, "/v1/standbys/{name}"},
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
