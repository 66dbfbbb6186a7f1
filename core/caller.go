package core

import "net"

// Caller is who makes a call, as its transport saw it: the values of its
// Authorization header (HTTP) or metadata (gRPC), and the peer's address
// (host:port). Access control resolves the principal from Authorization.
type Caller struct {
	Authorization []string
	Addr          string
}

// NewCaller returns the caller of authorization and addr.
func NewCaller(authorization []string, addr string) Caller {
	return Caller{Authorization: authorization, Addr: addr}
}

// Bearer returns the caller's one Authorization value, "" when none.
func (c Caller) Bearer() string {
	if len(c.Authorization) == 0 {
		return ""
	}
	return c.Authorization[0]
}

// Host is the caller's address without the port: the key of per-address
// limits. Forwarded headers are not trusted: behind a proxy, the proxy's
// address is the caller's.
func (c Caller) Host() string {
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return c.Addr
	}
	return host
}
