package rpcapi

import (
	"connectrpc.com/connect"

	"github.com/idmint/idmint/core"
)

// caller is who makes a call: its authorization metadata and its peer's
// address, nothing else of its metadata (a login cookie, headers a proxy
// would set are not the caller's credentials).
type caller = core.Caller

// newCaller returns the caller of the values of the call's authorization
// metadata and its peer's address (host:port): the one way both the
// connect-go handlers and the grpc-go listener make one.
func newCaller(authorization []string, addr string) caller {
	return core.NewCaller(authorization, addr)
}

// callerOf is the caller of a connect-go call.
func callerOf(req connect.AnyRequest) caller {
	return newCaller(req.Header().Values("Authorization"), req.Peer().Addr)
}
