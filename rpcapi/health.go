package rpcapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// health answers grpc.health.v1.Health from the core's health, for a
// caller that monitoring's access control admits (a token with the monitor
// scope when monitoring is protected): the overall status for "" and
// every idmint service served, the Snowflake part's for the Snowflake
// service.
type health struct {
	core     *core.Core
	services map[string]bool
}

// errUnknownService is a health check of a service not served here.
var errUnknownService = errors.New("rpcapi: no such service here")

// callerKey carries the health call's caller: grpchealth's Checker sees
// only a context.
type callerKey struct{}

func withCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := newCaller(r.Header.Values("Authorization"), r.RemoteAddr)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// isHealth reports whether procedure is the health service's.
func isHealth(procedure string) bool {
	return strings.HasPrefix(procedure, "/"+grpchealth.HealthV1ServiceName+"/")
}

// Check implements grpchealth.Checker.
func (h *health) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !h.services[req.Service] {
		return nil, connect.NewError(connect.CodeNotFound, errUnknownService)
	}
	c, _ := ctx.Value(callerKey{}).(caller)
	return h.check(ctx, c, req.Service)
}

// check is the status of service for caller c.
func (h *health) check(ctx context.Context, c caller, service string) (*grpchealth.CheckResponse, error) {
	if _, err := h.core.Authorize(ctx, c, core.AccessMonitoring); err != nil {
		return nil, err
	}
	doc, err := h.core.Health(ctx, "", false)
	if err != nil {
		return nil, err
	}
	serving := doc.Status != core.StatusUnavailable
	if service == idmintv1connect.SnowflakeServiceName {
		serving = doc.Snowflake != nil && doc.Snowflake.Serving
	}
	if serving {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
}
