package rpcapi

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // gzip, inflated no further than MaxRecvMsgSize
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/protoadapt"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/internal/faillog"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
)

// GRPCConfig shapes the grpc-go listener (NewGRPCServer).
type GRPCConfig struct {
	// TLS, when set, is the listener's TLS configuration: the HTTP
	// listener's own (idmint serve passes its reloading one, so a renewed
	// certificate or client CA applies to both). Nil serves cleartext
	// (h2c).
	TLS *tls.Config
	// MaxConcurrentStreams bounds the calls in flight on one connection
	// (0: DefaultMaxConcurrentStreams).
	MaxConcurrentStreams uint32
	// Logger logs a procedure's panic, and each call with AccessLog; nil
	// is slog.Default().
	Logger *slog.Logger
	// AccessLog logs one line per call, as serve's --access-log does per
	// HTTP request.
	AccessLog bool
	// MaxHeaderBytes, ReadHeaderTimeout and IdleTimeout are the HTTP
	// port's bounds on a request's headers, the time to send them and an
	// idle connection, which the listener follows (0: grpc-go's default).
	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// Trace, when set, starts the span of each unary call of procedure
	// from the caller's metadata (its traceparent) and returns the call's
	// context and the function that ends the span with the call's code
	// (tracing.Tracing.GRPC); nil traces nothing.
	Trace func(ctx context.Context, procedure string, md metadata.MD) (context.Context, func(codes.Code))
}

// DefaultMaxConcurrentStreams is net/http's HTTP/2 default, so that a
// client sees the same bound on both ports.
const DefaultMaxConcurrentStreams = 250

// Keepalive enforcement: a client may ping an idle connection, but not
// more often than minPingInterval (more often is answered GOAWAY, as
// grpc-go's default policy does at 5 minutes, which would cut off the many
// clients that ping every 10 to 60 s). The server pings a connection quiet
// for pingAfter and closes it when no answer comes within pingTimeout;
// a connection is recycled after maxConnectionAge (plus the grace for the
// calls in flight), so that clients spread over instances that come up.
const (
	minPingInterval       = 10 * time.Second
	pingAfter             = time.Minute
	pingTimeout           = 20 * time.Second
	maxConnectionAge      = 30 * time.Minute
	maxConnectionAgeGrace = time.Minute
)

// NewGRPCServer returns a grpc-go server of the procedures s serves on its
// HTTP port (Mount must have run: it gives s its core),
// grpc.health.v1 (Check from /id/health, as on the HTTP port) and
// reflection. A call has what it has on the HTTP port: the same typed
// procedures, tokens, scopes, limits, request IDs (ErrorInfo's
// "request_id") and error details, and the same series of
// idmint_http_requests_total and idmint_http_request_duration_seconds, by
// procedure path. A caller that the procedure's access control refuses
// from its metadata is refused in the tap, before its message is read;
// a message (inflated, when gzipped) is bounded by maxMessageBytes.
func NewGRPCServer(s *Service, cfg GRPCConfig) *grpc.Server {
	if s.core == nil {
		panic("rpcapi: NewGRPCServer of a Service not mounted")
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Failed calls' lines at most once a second per code.
	cfg.Logger = slog.New(faillog.New(cfg.Logger.Handler(), nil))
	g := &grpcServer{s: s, logger: cfg.Logger, accessLog: cfg.AccessLog, trace: cfg.Trace, unary: map[string]bool{}, prefix: requestPrefix()}
	opts := []grpc.ServerOption{
		grpc.InTapHandle(g.tap),
		grpc.MaxRecvMsgSize(maxMessageBytes),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     cfg.IdleTimeout,
			MaxConnectionAge:      maxConnectionAge,
			MaxConnectionAgeGrace: maxConnectionAgeGrace,
			Time:                  pingAfter,
			Timeout:               pingTimeout,
		}),
	}
	// The HTTP port's bounds on headers and on the time to send them (a
	// zero one is grpc-go's default, not none: 0 would refuse everything).
	if cfg.MaxHeaderBytes > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(uint32(cfg.MaxHeaderBytes)))
	}
	if cfg.ReadHeaderTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(cfg.ReadHeaderTimeout))
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	gs := grpc.NewServer(opts...)
	services := []struct {
		desc *grpc.ServiceDesc
		impl any
	}{
		{&idmintv1.IDService_ServiceDesc, grpcIDs{h: ids{s}}},
		{&idmintv1.SegmentService_ServiceDesc, grpcSegments{h: segments{s}}},
		{&idmintv1.SnowflakeService_ServiceDesc, grpcSnowflakes{h: snowflakes{s}}},
		{&idmintv1.AdminService_ServiceDesc, grpcAdmin{h: admin{s}}},
	}
	served := map[string]bool{}
	for _, sv := range services {
		if d := g.wrap(sv.desc, s.served); d != nil {
			gs.RegisterService(d, sv.impl)
			served[sv.desc.ServiceName] = true
		}
	}
	hd := g.wrap(&healthpb.Health_ServiceDesc, func(string) bool { return true })
	gs.RegisterService(hd, grpcHealth{h: &health{core: s.core, services: served}})
	reflection.Register(gs)
	return gs
}

// served says whether the HTTP port serves procedure, as Mount decides.
func (s *Service) served(procedure string) bool {
	op := byProcedure[procedure]
	return op != nil && op.served(s.core)
}

// grpcServer is NewGRPCServer's state: the service, and the unary
// procedures it wraps (call).
type grpcServer struct {
	s         *Service
	logger    *slog.Logger
	accessLog bool
	trace     func(ctx context.Context, procedure string, md metadata.MD) (context.Context, func(codes.Code))
	unary     map[string]bool // full method names; written only by NewGRPCServer
	prefix    string          // of the request IDs made here
	seq       atomic.Uint64
}

// wrap returns desc with only the methods keep keeps, each run by call;
// nil when it keeps none. Streams (none in idmint's services; the health
// Watch) stay as they are.
func (g *grpcServer) wrap(desc *grpc.ServiceDesc, keep func(procedure string) bool) *grpc.ServiceDesc {
	d := *desc
	d.Methods = nil
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		if !keep(full) {
			continue
		}
		g.unary[full] = true
		d.Methods = append(d.Methods, grpc.MethodDesc{MethodName: m.MethodName, Handler: g.call(full, m.Handler)})
	}
	if len(d.Methods) == 0 && len(d.Streams) == 0 {
		return nil
	}
	d.Streams = slices.Clone(desc.Streams)
	return &d
}

// grpcCall is one unary call and its context: its caller, its request ID
// and the core's bounded wait (core.Bounded). It is made in the handler's
// goroutine (call), not in the tap, which runs in the connection's reader:
// what the tap spends, every call on the connection waits for.
type grpcCall struct {
	core.Bounded
	g    *grpcServer
	c    caller
	addr string
	id   string // the caller's x-request-id; "" when it sent none usable
	seq  uint64 // this listener's number of the call, named only when asked
	// endSpan ends the call's span (GRPCConfig.Trace); nil untraced.
	endSpan func(codes.Code)
}

type grpcCallKey struct{}

// Value implements context.Context: the call itself, its request ID, and
// the rest from the stream's context.
func (rc *grpcCall) Value(key any) any {
	switch key {
	case grpcCallKey{}:
		return rc
	case core.RequestIDKey:
		return rc.requestID()
	}
	return rc.Bounded.Value(key)
}

// requestID is the caller's x-request-id when it sent a usable one, as
// X-Request-Id on HTTP, else this listener's name of the call.
func (rc *grpcCall) requestID() string {
	if rc.id != "" {
		return rc.id
	}
	return rc.g.prefix + "-" + strconv.FormatUint(rc.seq, 10)
}

// begin makes the call of procedure on the stream whose context is ctx
// (its peer), from md, the metadata the tap has, or with md nil from the
// incoming metadata of ctx, read key by key rather than copied whole. With
// traced and GRPCConfig.Trace its context holds its span.
func (g *grpcServer) begin(ctx context.Context, procedure string, md metadata.MD, traced bool) *grpcCall {
	rc := &grpcCall{g: g, seq: g.seq.Add(1)}
	start := time.Now()
	var authorization, requestID []string
	if md != nil {
		authorization, requestID = md["authorization"], md[requestIDKey]
	} else {
		authorization = metadata.ValueFromIncomingContext(ctx, "authorization")
		requestID = metadata.ValueFromIncomingContext(ctx, requestIDKey)
	}
	if traced && g.trace != nil {
		if md == nil {
			md, _ = metadata.FromIncomingContext(ctx)
		}
		ctx, rc.endSpan = g.trace(ctx, procedure, md)
	}
	g.s.core.Bound(&rc.Bounded, ctx, start)
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		rc.addr = p.Addr.String()
	}
	rc.c = newCaller(authorization, rc.addr)
	if len(requestID) > 0 && usableRequestID(requestID[0]) {
		rc.id = requestID[0]
	}
	return rc
}

// end records the call as a request of route answered with code (in the
// metrics, the HTTP status its outcome has on the HTTP port), logs it with
// AccessLog, ends its span and releases its timer.
func (g *grpcServer) end(rc *grpcCall, route string, code codes.Code) {
	rc.Finish()
	if rc.endSpan != nil {
		rc.endSpan(code)
	}
	status := httpStatusOf(connect.Code(code))
	elapsed := time.Since(rc.Start())
	g.s.core.Observe(route, status, elapsed)
	if g.accessLog {
		g.logger.Info("grpc", "procedure", route, "status", status, "duration", elapsed,
			"remote", rc.addr, "request_id", rc.requestID())
	}
}

// usableRequestID bounds a caller's request ID to what a log line and an
// error detail can carry: 1 to 64 printable ASCII characters.
func usableRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// requestPrefix is "host/random": request IDs unique across instances and
// restarts.
func requestPrefix() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strings.TrimSpace(host) + "/" + hex.EncodeToString(b[:]) + "-grpc"
}

// requestIDKey is the metadata a caller may name its call's request ID by,
// X-Request-Id on HTTP.
const requestIDKey = "x-request-id"

// tap runs when a call's headers arrive, before anything of its message is
// read (grpc-go calls it from the connection's reader): a caller of a
// unary procedure that its access control refuses from the metadata alone
// is answered at once, the rest of its stream reset unread. grpc-go cannot
// run an interceptor this early: a unary handler decodes its message
// before interceptors run. A procedure whose access control cannot refuse
// anyone here (the open mode's IDs) costs the tap one lookup.
func (g *grpcServer) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !g.unary[info.FullMethodName] || !g.s.prechecks(info.FullMethodName) {
		return ctx, nil
	}
	rc := g.begin(ctx, info.FullMethodName, info.Header, false)
	err := g.s.precheck(rc, info.FullMethodName, rc.c)
	if err == nil {
		rc.Finish()
		return ctx, nil
	}
	if g.trace != nil { // the refusal's span; a call let through has its own in call
		_, rc.endSpan = g.trace(ctx, info.FullMethodName, info.Header)
	}
	ce := connectError(rc, err)
	g.end(rc, info.FullMethodName, codes.Code(ce.Code()))
	return nil, grpcStatus(ce).Err()
}

// call runs a unary procedure's generated handler h (decode, then the
// typed procedure) in its call, turns its error into a gRPC status
// carrying its details, recovers a panic as Internal, and ends the call.
func (g *grpcServer) call(procedure string, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (reply any, err error) {
		rc := g.begin(ctx, procedure, nil, true)
		code := codes.OK
		defer func() {
			if v := recover(); v != nil {
				g.logger.Error("panic serving call", "procedure", procedure, "panic", fmt.Sprint(v),
					"request_id", rc.requestID(), "stack", string(debug.Stack()))
				reply, err, code = nil, status.Error(codes.Internal, errInternal.Error()), codes.Internal
			}
			g.end(rc, procedure, code)
		}()
		reply, err = h(srv, rc, dec, nil)
		if err == nil {
			return reply, nil
		}
		if st, ok := status.FromError(err); ok {
			// grpc-go's own (a message that does not decode).
			code = st.Code()
			return nil, err
		}
		ce := connectError(rc, err)
		code = codes.Code(ce.Code())
		logFailure(g.logger, procedure, ce, err, rc.requestID())
		if v := ce.Meta().Get("Retry-After"); v != "" {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("retry-after", v))
		}
		return nil, grpcStatus(ce).Err()
	}
}

// errInternal is what a caller is told of a bug: nothing of it.
var errInternal = errors.New("internal error")

// grpcStatus is e as a gRPC status: the same code and message, and its
// details (google.rpc.ErrorInfo, RetryInfo), so that a grpc-go client
// sees what it sees from the HTTP port.
func grpcStatus(e *connect.Error) *status.Status {
	st := status.New(codes.Code(e.Code()), e.Message())
	ds := e.Details()
	if len(ds) == 0 {
		return st
	}
	details := make([]protoadapt.MessageV1, 0, len(ds))
	for _, d := range ds {
		if v, err := d.Value(); err == nil {
			details = append(details, protoadapt.MessageV1Of(v))
		}
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		return withDetails
	}
	return st
}

// httpStatusOf is the HTTP status a call of this code has in the metrics:
// Connect's mapping of codes to statuses (the one its unary calls on the
// HTTP port answer with).
func httpStatusOf(c connect.Code) int {
	switch c {
	case 0:
		return http.StatusOK
	case connect.CodeCanceled:
		return 499
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		return http.StatusBadRequest
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// callerOfContext is the caller of the call ctx belongs to.
func callerOfContext(ctx context.Context) caller {
	if rc, ok := ctx.Value(grpcCallKey{}).(*grpcCall); ok {
		return rc.c
	}
	return caller{}
}
