// Package httpapi serves idmint over HTTP with chi:
//
//	GET /id?biz_tag=order              {"biz_tag":"order","id":"1001"}
//	GET /ids?biz_tag=order&count=3     {"biz_tag":"order","ids":["1002","1003","1004"]}
//	GET /id/health[?biz_tag=order]     status for dashboards and load balancers
//	GET /id/dashboard                  a live web page over /id/health
//	GET /metrics                       Prometheus metrics (see Metrics)
//	POST /v1/segments                  a whole range for a caller-chosen request_id (see SegmentRequest)
//	POST /v1/segments/giveback         the unused tail of such a range (see GiveBackRequest)
//
// IDs are JSON strings because JavaScript numbers lose integers above 2^53;
// send "Accept: text/plain" to /id to get the bare decimal number instead.
//
// Errors are JSON, {"error":{"code":"unknown_tag","message":"…"}}, with a
// stable code: 400 for bad input, 404 for an unknown tag, 503 with
// Retry-After when no ID can be handed out. Every error maps to its status in
// one place (errors.go).
//
//	srv := httpapi.NewServer(httpapi.Config{Allocator: a})
//	http.ListenAndServe(":8080", srv)
package httpapi
