package rpcapi

import (
	"context"
	"net/http"
	"net/url"

	"connectrpc.com/grpchealth"

	"github.com/idmint/idmint/httpapi"
)

// accessOf is each procedure's access control, for precheck: the
// operations' and the health check's (monitoring, as /id/health).
var accessOf = func() map[string]httpapi.Access {
	m := make(map[string]httpapi.Access, len(operations)+1)
	for _, op := range operations {
		m[op.procedure] = op.access
	}
	m["/"+grpchealth.HealthV1ServiceName+"/Check"] = httpapi.AccessMonitoring
	return m
}()

// precheck returns the refusal the access control of procedure answers c
// whatever its message says, from its metadata alone (httpapi's Precheck:
// no token, or a malformed, unknown or revoked one, where one is needed),
// as the *connect.Error the route would answer, with ctx's request ID; nil
// when the call may be read. It reads no message: the grpc-go listener
// calls it from its tap, before the message is decompressed or parsed.
func (s *Service) precheck(ctx context.Context, procedure string, c caller) error {
	a, ok := accessOf[procedure]
	if !ok || a == httpapi.AccessOpen {
		return nil
	}
	r := (&http.Request{Method: http.MethodPost, URL: &url.URL{Path: procedure}, Header: c.header,
		RemoteAddr: c.addr}).WithContext(ctx)
	if r.Header == nil {
		r.Header = http.Header{}
	}
	err := s.srv.Precheck(r, a)
	if err == nil {
		return nil
	}
	rep := replies.Get().(*reply)
	defer rep.release()
	s.srv.WriteError(rep, r, err)
	if rep.status == 0 {
		rep.status = http.StatusOK
	}
	return replyError(ctx, rep)
}
