package rpcapi

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/internal/faillog"
	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/wire"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo of every error;
// its reason is the stable idmint code (wire.Code…).
const ErrorDomain = "idmint"

// grpcCodes is the one table from an idmint error code to its gRPC code,
// as the gRPC mapping of HTTP statuses reads, with the conflicts told apart
// by kind (an existing tag, another caller's request). A code missing from
// it is Internal; TestConnectCodes_Every checks that every code of
// httpapi's error table is here.
var grpcCodes = map[string]connect.Code{
	wire.CodeBadRequest:            connect.CodeInvalidArgument,
	wire.CodeInvalidTag:            connect.CodeInvalidArgument,
	wire.CodeInvalidCount:          connect.CodeInvalidArgument,
	wire.CodeInvalidFormat:         connect.CodeInvalidArgument,
	wire.CodeInvalidSize:           connect.CodeInvalidArgument,
	wire.CodeInvalidRequestID:      connect.CodeInvalidArgument,
	wire.CodeInvalidRange:          connect.CodeInvalidArgument,
	wire.CodeInvalidHolderKey:      connect.CodeInvalidArgument,
	wire.CodeInvalidFloor:          connect.CodeInvalidArgument,
	wire.CodeInvalidID:             connect.CodeInvalidArgument,
	wire.CodeInvalidJSON:           connect.CodeInvalidArgument,
	wire.CodeInvalidSpec:           connect.CodeInvalidArgument,
	wire.CodeUnauthorized:          connect.CodeUnauthenticated,
	wire.CodeForbidden:             connect.CodePermissionDenied,
	wire.CodeNotHolder:             connect.CodePermissionDenied,
	wire.CodeUnknownTag:            connect.CodeNotFound,
	wire.CodeUnknownToken:          connect.CodeNotFound,
	wire.CodeNotFound:              connect.CodeNotFound,
	wire.CodeMethod:                connect.CodeUnimplemented,
	wire.CodeTagExists:             connect.CodeAlreadyExists,
	wire.CodeRequestConflict:       connect.CodeFailedPrecondition,
	wire.CodeGivenBack:             connect.CodeFailedPrecondition,
	wire.CodeNotRaised:             connect.CodeFailedPrecondition,
	wire.CodeRateLimited:           connect.CodeResourceExhausted,
	wire.CodeQueryTooLong:          connect.CodeResourceExhausted,
	wire.CodeBodyTooLarge:          connect.CodeResourceExhausted,
	wire.CodeUnavailable:           connect.CodeUnavailable,
	wire.CodeRolledBack:            connect.CodeUnavailable,
	wire.CodeExhausted:             connect.CodeUnavailable,
	wire.CodeShareExhausted:        connect.CodeUnavailable,
	wire.CodeRegionConflict:        connect.CodeUnavailable,
	wire.CodeShuttingDown:          connect.CodeUnavailable,
	wire.CodeSnowflakeNoWorker:     connect.CodeUnavailable,
	wire.CodeSnowflakeLeaseExpired: connect.CodeUnavailable,
	wire.CodeSnowflakeClockSkew:    connect.CodeUnavailable,
	wire.CodeSnowflakeBackwards:    connect.CodeUnavailable,
	wire.CodeSnowflakeExhausted:    connect.CodeUnavailable,
	wire.CodeInternal:              connect.CodeInternal,
}

// connectError is the one mapping from an error a procedure returns to a
// connect error: a connect error as it is; any other by its row of
// core.Rules: the gRPC code of its code (grpcCodes), its public message
// (redacted, never SQL), google.rpc.ErrorInfo (domain idmint, reason the
// code, metadata request_id: core.RequestID, the one in the server's log
// lines) and, when the row asks for a wait, google.rpc.RetryInfo and
// Retry-After. An error of no row is Internal and tells nothing. The
// grpc-go listener turns its result into a grpc status.
func connectError(ctx context.Context, err error) *connect.Error {
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce
	}
	rule := core.Lookup(err)
	grpcCode, ok := grpcCodes[rule.Code]
	if !ok {
		grpcCode = connect.CodeInternal
	}
	e := connect.NewError(grpcCode, errors.New(rule.Public(err)))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: rule.Code, Domain: ErrorDomain,
		Metadata: map[string]string{"request_id": core.RequestID(ctx)}}); err == nil {
		e.AddDetail(d)
	}
	if wait := rule.Wait(err); wait > 0 {
		secs := core.RetrySeconds(wait)
		if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(secs) * time.Second)}); err == nil {
			e.AddDetail(d)
		}
		e.Meta().Set("Retry-After", strconv.Itoa(secs))
	}
	return e
}

// logFailure logs a call that failed on the server's side (a code Connect
// answers with a 5xx: Unavailable, Internal, …) as the HTTP API logs a
// 5xx: one faillog.Message line with the procedure, the idmint code, the
// error redacted and the request ID (the one in its ErrorInfo), at most
// once a second per code. A refusal (4xx) is not logged: it is counted.
func logFailure(logger *slog.Logger, procedure string, ce *connect.Error, err error, requestID string) {
	status := httpStatusOf(ce.Code())
	if status < 500 {
		return
	}
	logger.Warn(faillog.Message, "procedure", procedure, "status", status, "code", core.Lookup(err).Code,
		"grpc_code", ce.Code().String(), "err", redact.Error(err), "request_id", requestID)
}
