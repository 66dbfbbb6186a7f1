package rpcapi

import (
	"context"
	"net/http"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// operation is one procedure: its HTTP twin (its method and its path
// pattern in openapi.yaml), the access control it sits behind (checked
// once before the call's message is read, and whole by the core
// operation), and whether the core serves it.
type operation struct {
	procedure string
	method    string
	path      string
	access    core.Access
	served    func(*core.Core) bool
}

func always(*core.Core) bool { return true }

// operations is every procedure, in one table: the routes of the
// connect-go handlers and of the grpc-go listener. A procedure is served
// only when the core serves its operation (the Snowflake procedures with
// --snowflake, the admin ones with an admin store); the others answer
// Unimplemented. The test against openapi.yaml fails when either side has
// an operation the other lacks.
var operations = []operation{
	{idmintv1connect.IDServiceNextIDProcedure, http.MethodGet, "/id", core.AccessIDs, always},
	{idmintv1connect.IDServiceNextIDsProcedure, http.MethodGet, "/ids", core.AccessIDs, always},
	{idmintv1connect.SegmentServiceGrantRangeProcedure, http.MethodPost, "/v1/segments", core.AccessIDs, always},
	{idmintv1connect.SegmentServiceGiveBackProcedure, http.MethodPost, "/v1/segments/giveback", core.AccessIDs, always},
	{idmintv1connect.SnowflakeServiceNextSnowflakeProcedure, http.MethodGet, "/snowflake", core.AccessIDs, (*core.Core).SnowflakeOn},
	{idmintv1connect.SnowflakeServiceNextSnowflakesProcedure, http.MethodGet, "/snowflakes", core.AccessIDs, (*core.Core).SnowflakeOn},
	{idmintv1connect.SnowflakeServiceParseSnowflakeProcedure, http.MethodGet, "/snowflake/parse", core.AccessOpen, (*core.Core).SnowflakeOn},
	{idmintv1connect.AdminServiceListTagsProcedure, http.MethodGet, "/v1/tags", core.AccessAdmin, (*core.Core).AdminOn},
	{idmintv1connect.AdminServiceCreateTagProcedure, http.MethodPost, "/v1/tags", core.AccessAdmin, (*core.Core).AdminOn},
	{idmintv1connect.AdminServiceGetTagProcedure, http.MethodGet, "/v1/tags/{biz_tag}", core.AccessAdmin, (*core.Core).AdminOn},
	{idmintv1connect.AdminServiceUpdateTagProcedure, http.MethodPatch, "/v1/tags/{biz_tag}", core.AccessAdmin, (*core.Core).AdminOn},
	{idmintv1connect.AdminServiceBumpTagProcedure, http.MethodPost, "/v1/tags/{biz_tag}/bump", core.AccessAdmin, (*core.Core).AdminOn},
	{idmintv1connect.AdminServiceListTokensProcedure, http.MethodGet, "/v1/tokens", core.AccessAdmin, (*core.Core).TokensOn},
	{idmintv1connect.AdminServiceCreateTokenProcedure, http.MethodPost, "/v1/tokens", core.AccessAdmin, (*core.Core).TokensOn},
	{idmintv1connect.AdminServiceRevokeTokenProcedure, http.MethodDelete, "/v1/tokens/{id}", core.AccessAdmin, (*core.Core).TokensOn},
	{idmintv1connect.AdminServiceListStandbysProcedure, http.MethodGet, "/v1/standbys", core.AccessAdmin, (*core.Core).StandbysOn},
	{idmintv1connect.AdminServiceForgetStandbyProcedure, http.MethodDelete, "/v1/standbys/{name}", core.AccessAdmin, (*core.Core).StandbysOn},
}

// notOperations are the HTTP routes that are no procedure: /id/health is
// the standard health service; the others are for browsers and scrapers.
var notOperations = map[string]string{
	"GET /id/health":               "grpc.health.v1.Health/Check",
	"GET /id/live":                 "liveness for HTTP probes: it asks nothing of the core",
	"GET /id/dashboard":            "a web page",
	"GET /metrics":                 "Prometheus",
	"GET /openapi.yaml":            "the OpenAPI document; reflection describes the RPCs",
	"GET /id/login":                "the dashboard's login form, for browsers",
	"POST /id/login":               "the dashboard's login, for browsers",
	"POST /id/logout":              "the dashboard's logout, for browsers",
	"GET /api/segment/get/{key}":   "Leaf's route for Leaf's callers: NextID",
	"GET /api/snowflake/get/{key}": "Leaf's route for Leaf's callers: NextSnowflake",
}

// byProcedure indexes operations.
var byProcedure = func() map[string]*operation {
	m := make(map[string]*operation, len(operations))
	for i := range operations {
		m[operations[i].procedure] = &operations[i]
	}
	return m
}()

// precheck refuses, before its message is read, a caller of procedure
// that its operation's access control refuses from its credentials alone
// (core.Core.Precheck): no token where one is needed, or a malformed,
// unknown or revoked one. The health service is behind monitoring's; an
// unknown procedure asks nothing (it is answered Unimplemented).
func (s *Service) precheck(ctx context.Context, procedure string, c caller) error {
	return s.core.Precheck(ctx, c, accessOf(procedure))
}

// prechecks reports whether precheck can refuse a caller of procedure.
func (s *Service) prechecks(procedure string) bool {
	return s.core.Prechecks(accessOf(procedure))
}

// accessOf is procedure's access control: its operation's, monitoring's
// for the health service, none for a procedure unknown (it is answered
// Unimplemented).
func accessOf(procedure string) core.Access {
	if op := byProcedure[procedure]; op != nil {
		return op.access
	}
	if isHealth(procedure) {
		return core.AccessMonitoring
	}
	return core.AccessOpen
}
