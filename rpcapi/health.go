package rpcapi

import (
	"context"
	"encoding/json"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// health answers grpc.health.v1.Health from /id/health, run as the caller
// (a token with the monitor scope when monitoring is protected): the
// overall status for "" and every idmint service served, the Snowflake
// part's for the Snowflake service.
type health struct {
	gw       *gateway
	services map[string]bool
}

// outerKey carries the health call's HTTP request: grpchealth's Checker
// sees only a context, and the route needs the caller's headers.
type outerKey struct{}

func withOuterRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), outerKey{}, r)))
	})
}

// Check implements grpchealth.Checker.
func (h *health) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !h.services[req.Service] {
		return nil, connect.NewError(connect.CodeNotFound, errUnknownService)
	}
	var c caller
	if r, ok := ctx.Value(outerKey{}).(*http.Request); ok {
		c = caller{header: r.Header, addr: r.RemoteAddr}
	}
	rep, err := h.gw.do(ctx, c, http.MethodGet, "/id/health", nil)
	if err != nil {
		return nil, err
	}
	defer rep.release()
	if rep.status != http.StatusOK && rep.status != http.StatusServiceUnavailable {
		return nil, replyError(ctx, rep)
	}
	serving := rep.status == http.StatusOK
	if req.Service == idmintv1connect.SnowflakeServiceName {
		var doc struct {
			Snowflake *struct {
				Serving bool `json:"serving"`
			} `json:"snowflake"`
		}
		if json.Unmarshal(rep.body.Bytes(), &doc) != nil || doc.Snowflake == nil {
			return nil, connect.NewError(connect.CodeInternal, errBadReply)
		}
		serving = doc.Snowflake.Serving
	}
	if serving {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
}
