// Package core holds what every transport of idmint shares, whatever
// carries the call: who calls (Caller: the bearer token's principal, the
// peer address) and the request ID a call is known by in logs and error
// details. httpapi and rpcapi are adapters around it: they decode a call,
// hand it on, and map the error they get back at their edge (httpapi to an
// HTTP status, rpcapi to a gRPC code, one table each) from the error's
// stable code (wire.CodeOf).
//
//	ctx = core.WithRequestID(ctx, "req-1")
//	_ = core.RequestID(ctx) // "req-1", in the ErrorInfo of an error reply
package core
