package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idmint/idmint/internal/checker"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/servetest"
)

// The gRPC tests call real `idmint serve` processes with real clients:
// grpc-go (Invoke with the schema's messages: the API needs no generated
// grpc-go stubs), connect-go's generated client (Connect and gRPC-Web over
// HTTP/1.1), grpcurl, and HTTP/JSON beside them.

// grpcConn dials addr over h2c.
func grpcConn(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// nextIDGRPC calls NextID over gRPC.
func nextIDGRPC(ctx context.Context, cc *grpc.ClientConn, tag string) (int64, error) {
	var resp idmintv1.NextIDResponse
	err := cc.Invoke(ctx, idmintv1connect.IDServiceNextIDProcedure, &idmintv1.NextIDRequest{BizTag: tag}, &resp)
	return resp.GetId(), err
}

// errorDetails returns the ErrorInfo and RetryInfo of a gRPC error.
func errorDetails(err error) (*errdetails.ErrorInfo, *errdetails.RetryInfo) {
	var info *errdetails.ErrorInfo
	var retry *errdetails.RetryInfo
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	return info, retry
}

// grpcSetup builds idmint, migrates a fresh PostgreSQL database and
// creates the tag order.
func grpcSetup(t *testing.T) (dir, bin, url string) {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes")
	}
	dir = t.TempDir()
	bin = servetest.Build(t)
	url = pgtest.Shared(t).NewDatabase(t)
	idmint(t, "migrate", "--database-url", url)
	idmint(t, "tag", "create", "order", "--step", "50", "--database-url", url)
	return dir, bin, url
}

// TestServe_GRPC: three instances on one PostgreSQL, IDs taken at once over
// gRPC, Connect, gRPC-Web and HTTP/JSON: no duplicate, each client's IDs
// increasing; grpcurl lists the services by reflection and calls NextID;
// the health service says serving.
func TestServe_GRPC(t *testing.T) {
	dir, bin, url := grpcSetup(t)
	procs := make([]*servetest.Process, 3)
	for i := range procs {
		procs[i] = &servetest.Process{Bin: bin, DatabaseURL: url, Instance: fmt.Sprint("g", i),
			LogPath: filepath.Join(dir, fmt.Sprint("g", i, ".log")), Args: serveArgs()}
		procs[i].Start(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("health", func(t *testing.T) {
		hc := healthpb.NewHealthClient(grpcConn(t, procs[0].Addr))
		for _, svc := range []string{"", idmintv1connect.IDServiceName, idmintv1connect.SegmentServiceName, idmintv1connect.SnowflakeServiceName} {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Check(%q) = %v, %v; want SERVING", svc, resp.GetStatus(), err)
			}
		}
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
			t.Errorf("Check(unknown service): %v, want NotFound", err)
		}
	})

	t.Run("snowflake", func(t *testing.T) {
		c := idmintv1connect.NewSnowflakeServiceClient(http.DefaultClient, "http://"+procs[2].Addr, connect.WithGRPC())
		got, err := c.NextSnowflakes(ctx, connect.NewRequest(&idmintv1.NextSnowflakesRequest{Count: 3}))
		if err != nil || len(got.Msg.GetIds()) != 3 {
			t.Fatalf("NextSnowflakes: %v, %v; want 3 ids", got, err)
		}
		id := got.Msg.GetIds()[2]
		parsed, err := c.ParseSnowflake(ctx, connect.NewRequest(&idmintv1.ParseSnowflakeRequest{Id: id}))
		if err != nil || parsed.Msg.GetId() != id || parsed.Msg.GetTime().AsTime().Before(time.Now().Add(-time.Minute)) ||
			parsed.Msg.GetLayout() == "" {
			t.Fatalf("ParseSnowflake(%d): %v, %v; want its parts, a time of the last minute", id, parsed, err)
		}
		if _, err := c.ParseSnowflake(ctx, connect.NewRequest(&idmintv1.ParseSnowflakeRequest{Id: -1})); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("ParseSnowflake(-1): %v, want InvalidArgument", err)
		}
	})

	t.Run("grpcurl", func(t *testing.T) {
		grpcurl := func(args ...string) string {
			t.Helper()
			out, err := exec.CommandContext(ctx, "go", append([]string{"tool", "grpcurl", "-plaintext"}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("grpcurl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		list := grpcurl(procs[1].Addr, "list")
		for _, svc := range []string{"grpc.health.v1.Health", idmintv1connect.IDServiceName, idmintv1connect.SegmentServiceName,
			idmintv1connect.SnowflakeServiceName, idmintv1connect.AdminServiceName} {
			if !strings.Contains(list, svc+"\n") {
				t.Errorf("grpcurl list lacks %s:\n%s", svc, list)
			}
		}
		out := grpcurl("-d", `{"biz_tag":"order"}`, procs[1].Addr, "idmint.v1.IDService/NextID")
		if !strings.Contains(out, `"bizTag": "order"`) || !strings.Contains(out, `"id": "`) {
			t.Errorf("grpcurl NextID:\n%s", out)
		}
	})

	t.Run("no duplicates across protocols", func(t *testing.T) {
		const calls = 200
		c := checker.New()
		var wg sync.WaitGroup
		client := func(name string, next func() ([]int64, error)) {
			wg.Go(func() {
				for range calls {
					c.Attempt()
					ids, err := next()
					if err != nil {
						c.Fail(fmt.Errorf("%s: %w", name, err))
						continue
					}
					c.Ack(name, "order", ids...)
				}
			})
		}
		for i, p := range procs {
			cc := grpcConn(t, p.Addr)
			base := "http://" + p.Addr
			connectIDs := idmintv1connect.NewIDServiceClient(http.DefaultClient, base)
			webIDs := idmintv1connect.NewIDServiceClient(http.DefaultClient, base, connect.WithGRPCWeb())
			client(fmt.Sprint("grpc", i), func() ([]int64, error) {
				id, err := nextIDGRPC(ctx, cc, "order")
				return []int64{id}, err
			})
			client(fmt.Sprint("grpc-ids", i), func() ([]int64, error) {
				var resp idmintv1.NextIDsResponse
				err := cc.Invoke(ctx, idmintv1connect.IDServiceNextIDsProcedure, &idmintv1.NextIDsRequest{BizTag: "order", Count: 7}, &resp)
				return resp.GetIds(), err
			})
			client(fmt.Sprint("connect", i), func() ([]int64, error) {
				resp, err := connectIDs.NextID(ctx, connect.NewRequest(&idmintv1.NextIDRequest{BizTag: "order"}))
				if err != nil {
					return nil, err
				}
				return []int64{resp.Msg.GetId()}, nil
			})
			client(fmt.Sprint("grpc-web", i), func() ([]int64, error) {
				resp, err := webIDs.NextIDs(ctx, connect.NewRequest(&idmintv1.NextIDsRequest{BizTag: "order", Count: 3,
					Format: idmintv1.Format_FORMAT_RANGES}))
				if err != nil {
					return nil, err
				}
				var ids []int64
				for _, rg := range resp.Msg.GetRanges() {
					for id := rg.GetFirst(); id <= rg.GetLast(); id++ {
						ids = append(ids, id)
					}
				}
				return ids, nil
			})
			client(fmt.Sprint("http", i), func() ([]int64, error) {
				id, _, err := servetest.FetchID(ctx, http.DefaultClient, base+"/id?biz_tag=order")
				return []int64{id}, err
			})
		}
		wg.Wait()
		r := c.Report()
		t.Log(r)
		if !r.Valid() || r.IDs() != int64(len(procs))*calls*(1+7+1+3+1) {
			t.Fatalf("want every call answered, no duplicate, each client's IDs increasing:\n%s", r)
		}
	})
}

// TestServe_GRPCRefusals: a token-protected instance refuses a call without
// a token (Unauthenticated) and one outside the token's scope
// (PermissionDenied), and a token past its rate gets ResourceExhausted with
// RetryInfo; every refusal carries the idmint code in ErrorInfo.
func TestServe_GRPCRefusals(t *testing.T) {
	dir, bin, url := grpcSetup(t)
	idmint(t, "tag", "create", "other", "--database-url", url)
	token := strings.TrimSpace(idmint(t, "token", "create", "--name", "app", "--scope", "ids:order", "--rate", "1", "--database-url", url))
	p := &servetest.Process{Bin: bin, DatabaseURL: url, Instance: "guarded",
		LogPath: filepath.Join(dir, "guarded.log"), Args: serveArgs("--auth", "token")}
	p.Start(t)
	cc := grpcConn(t, p.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)

	tests := []struct {
		name   string
		ctx    context.Context
		tag    string
		count  int32
		code   codes.Code
		reason string
		retry  bool
	}{
		{name: "no token", ctx: ctx, tag: "order", count: 1, code: codes.Unauthenticated, reason: "unauthorized"},
		{name: "bad token", ctx: metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer idm_nope"), tag: "order", count: 1,
			code: codes.Unauthenticated, reason: "unauthorized"},
		{name: "tag outside the scope", ctx: authed, tag: "other", count: 1, code: codes.PermissionDenied, reason: "forbidden"},
		{name: "bad count", ctx: authed, tag: "order", count: 0, code: codes.InvalidArgument, reason: "invalid_count"},
		// The token's burst is one request of the largest count (1000),
		// of which the bad count took one.
		{name: "the burst", ctx: authed, tag: "order", count: 990, code: codes.OK},
		{name: "past the rate", ctx: authed, tag: "order", count: 1000, code: codes.ResourceExhausted, reason: "rate_limited", retry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp idmintv1.NextIDsResponse
			err := cc.Invoke(tt.ctx, idmintv1connect.IDServiceNextIDsProcedure, &idmintv1.NextIDsRequest{BizTag: tt.tag, Count: tt.count}, &resp)
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code %v (%v), want %v", got, err, tt.code)
			}
			if tt.code == codes.OK {
				if len(resp.GetIds()) != int(tt.count) {
					t.Fatalf("%d ids, want %d", len(resp.GetIds()), tt.count)
				}
				return
			}
			info, retry := errorDetails(err)
			if info.GetReason() != tt.reason || info.GetDomain() != "idmint" {
				t.Errorf("ErrorInfo %v, want reason %q in domain idmint", info, tt.reason)
			}
			if tt.retry != (retry != nil) || tt.retry && retry.GetRetryDelay().AsDuration() < time.Second {
				t.Errorf("RetryInfo %v, want one (of at least 1s): %v", retry, tt.retry)
			}
		})
	}
	t.Run("connect client without a token", func(t *testing.T) {
		_, err := idmintv1connect.NewIDServiceClient(http.DefaultClient, "http://"+p.Addr).
			NextID(ctx, connect.NewRequest(&idmintv1.NextIDRequest{BizTag: "order"}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("%v, want Unauthenticated", err)
		}
		var ce *connect.Error
		if !errors.As(err, &ce) || len(ce.Details()) == 0 {
			t.Fatalf("%v: want ErrorInfo details", err)
		}
	})
}
