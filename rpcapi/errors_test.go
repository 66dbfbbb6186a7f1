package rpcapi

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/getkin/kin-openapi/openapi3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/wire"
)

// TestConnectError_Codes: the gRPC code of each kind of idmint error,
// by its code alone (no HTTP status on the way).
func TestConnectError_Codes(t *testing.T) {
	tests := []struct {
		name string
		code string
		want connect.Code
	}{
		{"bad input", wire.CodeInvalidTag, connect.CodeInvalidArgument},
		{"no token", wire.CodeUnauthorized, connect.CodeUnauthenticated},
		{"scope", wire.CodeForbidden, connect.CodePermissionDenied},
		{"unknown tag", wire.CodeUnknownTag, connect.CodeNotFound},
		{"tag exists", wire.CodeTagExists, connect.CodeAlreadyExists},
		{"not the holder", wire.CodeNotHolder, connect.CodePermissionDenied},
		{"given back", wire.CodeGivenBack, connect.CodeFailedPrecondition},
		{"rate limited", wire.CodeRateLimited, connect.CodeResourceExhausted},
		{"body too large", wire.CodeBodyTooLarge, connect.CodeResourceExhausted},
		{"store down", wire.CodeUnavailable, connect.CodeUnavailable},
		{"exhausted", wire.CodeExhausted, connect.CodeUnavailable},
		{"bug", wire.CodeInternal, connect.CodeInternal},
		{"not idmint's reply", wire.CodeHTTPError, connect.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := connectError(context.Background(), wire.NewError(tt.code, "m")).Code(); got != tt.want {
				t.Errorf("connectError(%s) = %v, want %v", tt.code, got, tt.want)
			}
		})
	}
}

// TestConnectError_Every: every code of the API (the OpenAPI document's
// enum, which httpapi's table test keeps equal to its codes) has its row
// in grpcCodes; an error without a code is Internal and tells nothing.
func TestConnectError_Every(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["error"].Value.Properties["code"].Value.Enum {
		if _, ok := grpcCodes[v.(string)]; !ok {
			t.Errorf("code %s has no gRPC code", v)
		}
	}
	e := connectError(core.WithRequestID(context.Background(), "rid-1"), errors.New(`ERROR: relation "x" (SQLSTATE 42P01)`))
	if e.Code() != connect.CodeInternal || e.Message() != "internal error" {
		t.Fatalf("an unknown error: %v", e)
	}
}

// TestConnectError_Details: ErrorInfo carries the code and the request
// ID; a wait the error asks for becomes RetryInfo and Retry-After.
func TestConnectError_Details(t *testing.T) {
	ctx := core.WithRequestID(context.Background(), "rid-7")
	err := wire.DecodeError(http.StatusTooManyRequests, "3", []byte(`{"error":{"code":"rate_limited","message":"slow down"}}`))
	e := connectError(ctx, err)
	if e.Code() != connect.CodeResourceExhausted || e.Message() != "slow down" || e.Meta().Get("Retry-After") != "3" {
		t.Fatalf("connectError = %v (Retry-After %q)", e, e.Meta().Get("Retry-After"))
	}
	var info *errdetails.ErrorInfo
	var retry *errdetails.RetryInfo
	for _, d := range e.Details() {
		switch v, _ := d.Value(); m := v.(type) {
		case *errdetails.ErrorInfo:
			info = m
		case *errdetails.RetryInfo:
			retry = m
		}
	}
	if info == nil || info.GetReason() != wire.CodeRateLimited || info.GetDomain() != ErrorDomain || info.GetMetadata()["request_id"] != "rid-7" {
		t.Fatalf("ErrorInfo = %v", info)
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != 3*time.Second {
		t.Fatalf("RetryInfo = %v", retry)
	}
}
