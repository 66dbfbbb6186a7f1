// Package rpcapi serves idmint's API over gRPC, gRPC-Web and Connect
// (connect-go), on the routes of the HTTP API's router: the same port, the
// same tokens, scopes, limits, metrics and request IDs as HTTP/JSON.
//
// It is an adapter of the core, as httpapi is: each procedure of
// proto/idmint/v1 decodes its message, calls the core operation of the
// same name with the caller (its authorization metadata and address), and
// encodes the typed reply; nothing runs through HTTP in process.
// operations is the one table of procedures (and the test that keeps it,
// the OpenAPI document and the schema in step); a caller its operation's
// access control refuses from its credentials alone is refused before its
// message is read (precheck). An error is mapped once (connectError) from
// its row of core.Rules: the gRPC code of its code (grpcCodes), with
// google.rpc.ErrorInfo (domain idmint, reason the stable code, the request
// ID) and, when the row asks for a wait, google.rpc.RetryInfo.
//
// Beside them: the standard health service (grpc.health.v1.Health, the
// core's health, as /id/health says it) and server reflection (v1 and
// v1alpha), so that grpcurl can list and call the services.
//
//	srv := httpapi.NewServer(httpapi.Config{Allocator: a, RPC: rpcapi.New()})
//	hs := srv.HTTPServer()
//	hs.Protocols = new(http.Protocols)
//	hs.Protocols.SetHTTP1(true)
//	hs.Protocols.SetUnencryptedHTTP2(true) // gRPC over h2c
package rpcapi
