package core

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
