package rpcapi

import (
	"context"
	"errors"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idmint/idmint/core"
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
	wire.CodeShuttingDown:          connect.CodeUnavailable,
	wire.CodeSnowflakeNoWorker:     connect.CodeUnavailable,
	wire.CodeSnowflakeLeaseExpired: connect.CodeUnavailable,
	wire.CodeSnowflakeClockSkew:    connect.CodeUnavailable,
	wire.CodeSnowflakeBackwards:    connect.CodeUnavailable,
	wire.CodeSnowflakeExhausted:    connect.CodeUnavailable,
	wire.CodeInternal:              connect.CodeInternal,
}

// connectError is the one mapping from an error a procedure returns to a
// connect error: a connect error as it is; an error with an idmint code
// (wire.CodeOf) the gRPC code of grpcCodes, its message,
// google.rpc.ErrorInfo (domain idmint, reason the code, metadata
// request_id: core.RequestID, the one in the server's log lines) and, when
// it asks for a wait, google.rpc.RetryInfo and Retry-After; anything else
// Internal, telling nothing. The grpc-go listener turns its result into a
// grpc status.
func connectError(ctx context.Context, err error) *connect.Error {
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce
	}
	code, msg := wire.CodeOf(err), "internal error"
	if code == "" || code == wire.CodeHTTPError {
		// Not one of idmint's: Go's server itself (a header too
		// large), or a bug.
		code = wire.CodeInternal
	} else {
		msg = err.Error()
	}
	if we, ok := errors.AsType[*wire.Error](err); ok && we.Message != "" {
		msg = we.Message
	}
	grpcCode, ok := grpcCodes[code]
	if !ok {
		grpcCode = connect.CodeInternal
	}
	e := connect.NewError(grpcCode, errors.New(msg))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: code, Domain: ErrorDomain,
		Metadata: map[string]string{"request_id": core.RequestID(ctx)}}); err == nil {
		e.AddDetail(d)
	}
	if we, ok := errors.AsType[*wire.Error](err); ok && we.RetryAfter > 0 {
		if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(we.RetryAfter)}); err == nil {
			e.AddDetail(d)
		}
		e.Meta().Set("Retry-After", strconv.Itoa(int(we.RetryAfter.Seconds())))
	}
	return e
}
