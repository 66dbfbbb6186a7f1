package rpcapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"connectrpc.com/connect"
	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/wire"
)

// gateway runs procedures as HTTP requests through the server's router.
type gateway struct {
	router http.Handler
}

// caller is who makes a call: what of the RPC request the HTTP route sees.
type caller struct {
	header http.Header // the call's headers (gRPC metadata)
	addr   string      // the peer's address, host:port
}

func callerOf(req connect.AnyRequest) caller {
	return caller{header: req.Header(), addr: req.Peer().Addr}
}

// reply is the HTTP reply of a route run in-process. Replies are pooled.
type reply struct {
	header http.Header
	status int
	body   bytes.Buffer
}

var replies = sync.Pool{New: func() any { return &reply{header: http.Header{}} }}

// maxPooledBody bounds the buffers kept: a rare large reply is left to the
// garbage collector.
const maxPooledBody = 64 << 10

func (r *reply) release() {
	if r.body.Cap() > maxPooledBody {
		return
	}
	clear(r.header)
	r.status = 0
	r.body.Reset()
	replies.Put(r)
}

// Header implements http.ResponseWriter.
func (r *reply) Header() http.Header { return r.header }

// WriteHeader implements http.ResponseWriter.
func (r *reply) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// Write implements http.ResponseWriter.
func (r *reply) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

// do runs method target (path and query) with body (nil: none) as the
// caller, through the router. The request's context keeps the outer one's
// values (its request ID, its deadline) with a routing context of its own.
// The caller releases the reply.
func (g *gateway) do(ctx context.Context, c caller, method, target string, body []byte) (*reply, error) {
	ctx = context.WithValue(ctx, chi.RouteCtxKey, chi.NewRouteContext())
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	req.RemoteAddr = c.addr
	if v := c.header.Values("Authorization"); len(v) > 0 {
		req.Header["Authorization"] = v
	}
	req.Header["Accept"] = acceptJSON
	if body != nil {
		req.Header["Content-Type"] = acceptJSON
	}
	rep := replies.Get().(*reply)
	g.router.ServeHTTP(rep, req)
	if rep.status == 0 {
		rep.status = http.StatusOK
	}
	return rep, nil
}

var acceptJSON = []string{"application/json"}

// call runs the route as do does and decodes a 2xx reply with decode; any
// other reply is returned as its error (replyError).
func (g *gateway) call(ctx context.Context, c caller, method, target string, body []byte, decode func([]byte) error) error {
	rep, err := g.do(ctx, c, method, target, body)
	if err != nil {
		return err
	}
	defer rep.release()
	if rep.status >= 300 {
		return replyError(ctx, rep)
	}
	if decode == nil {
		return nil
	}
	if err := decode(rep.body.Bytes()); err != nil {
		return connect.NewError(connect.CodeInternal, errBadReply)
	}
	return nil
}

// replyError turns an HTTP error reply (httpapi's JSON error, written from
// its one error table) into the connect error of its code (connectError),
// with the reply's Retry-After.
func replyError(ctx context.Context, rep *reply) *connect.Error {
	return connectError(ctx, wire.DecodeError(rep.status, rep.header.Get("Retry-After"), rep.body.Bytes()))
}

// Errors of the package itself; a route's errors are its own (replyError).
var (
	// errBadReply is a route's reply that the gateway cannot read: a bug.
	errBadReply = errors.New("rpcapi: the route's reply does not decode")
	// errUnknownService is a health check of a service not served here.
	errUnknownService = errors.New("rpcapi: no such service here")
)

// precheck wraps a procedure's handler: a caller that the access control a
// of its route refuses from the headers alone (srv.Precheck) is refused
// before anything of the call's message is read, with the error the route
// would answer (the route's reply, carried as replyError carries it).
func precheck(srv *httpapi.Server, refusals *connect.ErrorWriter, a httpapi.Access, next http.Handler) http.Handler {
	if a == httpapi.AccessOpen {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := srv.Precheck(r, a)
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		rep := replies.Get().(*reply)
		defer rep.release()
		srv.WriteError(rep, r, err)
		if rep.status == 0 {
			rep.status = http.StatusOK
		}
		refusals.Write(w, r, replyError(r.Context(), rep))
	})
}
