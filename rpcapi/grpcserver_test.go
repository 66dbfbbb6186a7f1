package rpcapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// grpcInflated counts what grpc-go's gzip inflates in this test binary:
// countingCompressor replaces the registered gzip (the one the grpc-go
// listener uses) by itself around it.
var grpcInflated atomic.Int64

func init() { encoding.RegisterCompressor(countingCompressor{encoding.GetCompressor("gzip")}) }

type countingCompressor struct{ encoding.Compressor }

func (c countingCompressor) Decompress(r io.Reader) (io.Reader, error) {
	d, err := c.Compressor.Decompress(r)
	if err != nil {
		return nil, err
	}
	return countingReader{d}, nil
}

type countingReader struct{ r io.Reader }

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	grpcInflated.Add(int64(n))
	return n, err
}

// Close hands the inflater back to gzip's pool, as grpc-go does.
func (c countingReader) Close() error {
	if cl, ok := c.r.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// grpcFixture is idmint's server in the token mode over a memory store
// with tag order, the service mounted on it, and its grpc-go listener.
type grpcFixture struct {
	rpcServer // do sends hand-made calls to the grpc-go listener
	metrics   *httpapi.Metrics
	conn      *grpc.ClientConn
	none      string // a token of the monitor scope only
}

func newGRPCFixture(tb testing.TB) *grpcFixture {
	tb.Helper()
	ctx := context.Background()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 1000}); err != nil {
		tb.Fatal(err)
	}
	f := &grpcFixture{metrics: httpapi.NewMetrics()}
	for _, tk := range []struct {
		dst   *string
		scope string
	}{{&f.ids, "ids"}, {&f.none, "monitor"}} {
		t, secret, err := token.New(tk.scope, []string{tk.scope})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := m.CreateToken(ctx, t); err != nil {
			tb.Fatal(err)
		}
		*tk.dst = secret
	}
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(), Instance: "test"})
	tb.Cleanup(func() { a.Close(context.Background()) })
	svc := New()
	httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), Admin: m, TokenAdmin: m, Metrics: f.metrics,
		Auth: httpapi.AuthConfig{Tokens: m, IDs: httpapi.AuthToken}, RPC: svc})
	gs := NewGRPCServer(svc, GRPCConfig{Logger: testlog.Discard()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go gs.Serve(ln)
	tb.Cleanup(gs.Stop)
	f.url = "http://" + ln.Addr().String()
	f.inflated = &grpcInflated
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	f.h2c = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &p}}
	tb.Cleanup(f.h2c.CloseIdleConnections)
	if f.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.conn.Close() })
	return f
}

func withToken(ctx context.Context, tk string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tk)
}

// grpcInfo is the ErrorInfo of a grpc-go client's error, nil without one.
func grpcInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info
		}
	}
	return nil
}

// TestGRPCServer_GzipBomb: on the grpc-go listener, the gzip bomb (63 MiB
// of zeros in 61 KB) is refused ResourceExhausted having been inflated no
// further than the message limit and a byte; without a token it is refused
// Unauthenticated in the tap, not inflated at all; a message over the
// limit as sent is refused without being parsed; a gzipped NextID is
// served.
func TestGRPCServer_GzipBomb(t *testing.T) {
	f := newGRPCFixture(t)
	ok, err := proto.Marshal(&idmintv1.NextIDRequest{BizTag: "order"})
	if err != nil {
		t.Fatal(err)
	}
	call := rpcCall{protocol: "grpc", procedure: idmintv1connect.IDServiceNextIDProcedure, body: gzipBomb(), gzip: true, token: f.ids}
	f.inflated.Store(0)
	if got := f.do(t, call); got.code != connect.CodeResourceExhausted {
		t.Errorf("the bomb: %v, want resource_exhausted", got.code)
	}
	if n := f.inflated.Load(); n == 0 || n > maxMessageBytes+1 {
		t.Errorf("the bomb inflated to %d bytes, want some, and at most the limit and a byte (%d)", n, maxMessageBytes+1)
	}

	call.token = ""
	f.inflated.Store(0)
	if got := f.do(t, call); got.code != connect.CodeUnauthenticated {
		t.Errorf("the bomb without a token: %v, want unauthenticated", got.code)
	}
	if n := f.inflated.Load(); n != 0 {
		t.Errorf("the bomb without a token inflated %d bytes, want none", n)
	}

	big, err := proto.Marshal(&idmintv1.NextIDRequest{BizTag: strings.Repeat("x", maxMessageBytes)})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.do(t, rpcCall{protocol: "grpc", procedure: idmintv1connect.IDServiceNextIDProcedure, body: big, token: f.ids}); got.code != connect.CodeResourceExhausted {
		t.Errorf("a message over the limit: %v, want resource_exhausted", got.code)
	}

	call.body, call.token = gzipped(ok), f.ids
	if got := f.do(t, call); got.code != 0 {
		t.Errorf("a gzipped NextID: %v, want OK", got.code)
	}
}

// TestGRPCServer_Calls: a grpc-go client gets IDs with a token; without
// one, with one of the wrong scope, for an unknown tag, it gets the HTTP
// port's codes and an ErrorInfo with the idmint code and the call's request
// ID (its own x-request-id when it sends one); each call is counted in the
// request metrics by procedure; the health check answers SERVING to a
// monitor token.
func TestGRPCServer_Calls(t *testing.T) {
	f := newGRPCFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := idmintv1.NewIDServiceClient(f.conn)
	a, err := ids.NextID(withToken(ctx, f.ids), &idmintv1.NextIDRequest{BizTag: "order"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ids.NextID(withToken(ctx, f.ids), &idmintv1.NextIDRequest{BizTag: "order"})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetId() <= a.GetId() {
		t.Errorf("second ID %d not above the first %d", b.GetId(), a.GetId())
	}

	for _, tc := range []struct {
		name   string
		ctx    context.Context
		tag    string
		code   codes.Code
		reason string
	}{
		{"no token", ctx, "order", codes.Unauthenticated, wire.CodeUnauthorized},
		{"bad token", withToken(ctx, "idm_nope"), "order", codes.Unauthenticated, wire.CodeUnauthorized},
		{"wrong scope", withToken(ctx, f.none), "order", codes.PermissionDenied, wire.CodeForbidden},
		{"unknown tag", withToken(ctx, f.ids), "nosuch", codes.NotFound, wire.CodeUnknownTag},
		{"bad tag", withToken(ctx, f.ids), "", codes.InvalidArgument, wire.CodeInvalidTag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ids.NextID(tc.ctx, &idmintv1.NextIDRequest{BizTag: tc.tag})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			info := grpcInfo(err)
			if info.GetReason() != tc.reason || info.GetMetadata()["request_id"] == "" {
				t.Errorf("ErrorInfo %v, want reason %s and a request_id", info, tc.reason)
			}
			_, err = ids.NextID(metadata.AppendToOutgoingContext(tc.ctx, "x-request-id", "mine-1"), &idmintv1.NextIDRequest{BizTag: tc.tag})
			if got := grpcInfo(err).GetMetadata()["request_id"]; got != "mine-1" {
				t.Errorf("request_id %q, want the caller's x-request-id mine-1", got)
			}
		})
	}

	route := idmintv1connect.IDServiceNextIDProcedure
	for code, want := range map[string]float64{"200": 2, "401": 4, "403": 2, "404": 2, "400": 2} {
		if got := requests(t, f.metrics, route, code); got != want {
			t.Errorf("idmint_http_requests_total{route=%q,code=%q} = %v, want %v", route, code, got, want)
		}
	}

	hc := healthpb.NewHealthClient(f.conn)
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.OK {
		t.Errorf("health without a token (monitoring open): %v", err)
	}
	res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: idmintv1connect.IDServiceName})
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of IDService: %v, %v; want SERVING", res, err)
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nosuch.Service"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("health of an unknown service: %v, want NotFound", err)
	}
	if _, err := idmintv1.NewSnowflakeServiceClient(f.conn).NextSnowflake(withToken(ctx, f.ids), &idmintv1.NextSnowflakeRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("NextSnowflake of a server without Snowflake: %v, want Unimplemented", err)
	}
}

// requests is idmint_http_requests_total{route, code}, 0 when absent.
func requests(tb testing.TB, m *httpapi.Metrics, route, code string) float64 {
	tb.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idmint_http_requests_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["code"] == code {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}
