// Package rpcapi serves idmint's API over gRPC, gRPC-Web and Connect
// (connect-go), on the routes of an httpapi.Server: the same port, the same
// tokens, scopes, limits, metrics and request IDs as HTTP/JSON.
//
// Each procedure of proto/idmint/v1 is one operation of the HTTP API
// (operations, the table that also keeps the OpenAPI document and the
// schema in step). A call runs the matching HTTP route in-process, through
// the server's router, with the caller's Authorization header and address:
// access control, rate limits and validation are those of the route, by
// construction, and an error is the route's row of httpapi's error table,
// carried as a gRPC status with google.rpc.ErrorInfo (the stable idmint
// code) and, when the route sends Retry-After, google.rpc.RetryInfo.
//
// Beside them: the standard health service (grpc.health.v1.Health,
// reflecting /id/health) and server reflection (v1 and v1alpha), so that
// grpcurl can list and call the services.
//
//	srv := httpapi.NewServer(httpapi.Config{Allocator: a, RPC: rpcapi.New()})
//	hs := srv.HTTPServer()
//	hs.Protocols = new(http.Protocols)
//	hs.Protocols.SetHTTP1(true)
//	hs.Protocols.SetUnencryptedHTTP2(true) // gRPC over h2c
package rpcapi
