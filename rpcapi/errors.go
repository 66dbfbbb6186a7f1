package rpcapi

import (
	"context"
	"errors"

	"connectrpc.com/connect"
)

// connectError is err as the status a call answers: a procedure's errors
// are *connect.Error already (replyError); anything else is a bug the
// caller sees as Internal, without its text.
func connectError(ctx context.Context, err error) *connect.Error {
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce
	}
	return connect.NewError(connect.CodeInternal, errInternal)
}

// errInternal is what a caller is told of an error that is no status.
var errInternal = errors.New("internal error")
