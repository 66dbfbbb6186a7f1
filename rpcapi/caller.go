package rpcapi

import "net/http"

// newCaller is the caller of a call that came with these Authorization
// values (gRPC metadata "authorization") from the address addr (host:port).
func newCaller(authorization []string, addr string) caller {
	c := caller{addr: addr}
	if len(authorization) > 0 {
		c.header = http.Header{"Authorization": authorization}
	}
	return c
}
