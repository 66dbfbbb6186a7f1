package rpcapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/wire"
)

// failureLine is a "request failed" line of a JSON log.
type failureLine struct {
	Msg       string `json:"msg"`
	Procedure string `json:"procedure"`
	Status    int    `json:"status"`
	Code      string `json:"code"`
	GRPCCode  string `json:"grpc_code"`
	RequestID string `json:"request_id"`
}

// TestCalls_FailureLogged: a call that fails on the server's side is
// logged as the HTTP API logs a 5xx, on the grpc-go listener and on the
// HTTP port alike: the procedure, the idmint code and the request ID its
// ErrorInfo carries; a refusal (a bad tag) is not logged.
func TestCalls_FailureLogged(t *testing.T) {
	ctx := t.Context()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 1000}); err != nil {
		t.Fatal(err)
	}
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(), Instance: "test"})
	var logs testlog.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	svc := New()
	web := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: logger, RPC: svc}))
	t.Cleanup(web.Close)
	gs := NewGRPCServer(svc, GRPCConfig{Logger: logger})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	viaGRPC := idmintv1.NewIDServiceClient(conn)
	viaConnect := idmintv1connect.NewIDServiceClient(web.Client(), web.URL)
	call := func(tag string) (grpcErr, connectErr error) {
		_, grpcErr = viaGRPC.NextID(ctx, &idmintv1.NextIDRequest{BizTag: tag})
		_, connectErr = viaConnect.NextID(ctx, connect.NewRequest(&idmintv1.NextIDRequest{BizTag: tag}))
		return grpcErr, connectErr
	}

	g, c := call("not a tag")
	if status.Code(g) != codes.InvalidArgument || connect.CodeOf(c) != connect.CodeInvalidArgument {
		t.Fatalf("a bad tag: %v, %v", g, c)
	}
	a.Close(context.Background())
	g, c = call("order")
	if status.Code(g) != codes.Unavailable || connect.CodeOf(c) != connect.CodeUnavailable {
		t.Fatalf("a closed allocator: %v, %v", g, c)
	}
	var connectInfo *errdetails.ErrorInfo
	if ce := new(connect.Error); errors.As(c, &ce) {
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				if info, ok := v.(*errdetails.ErrorInfo); ok {
					connectInfo = info
				}
			}
		}
	}
	gInfo := grpcInfo(g)
	if gInfo == nil || connectInfo == nil {
		t.Fatalf("no ErrorInfo: %v, %v", g, c)
	}

	var lines []failureLine
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var l failureLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		if l.Msg == "request failed" {
			lines = append(lines, l)
		}
	}
	const procedure = idmintv1connect.IDServiceNextIDProcedure
	want := map[string]bool{gInfo.GetMetadata()["request_id"]: true, connectInfo.GetMetadata()["request_id"]: true}
	if len(lines) != 2 || len(want) != 2 {
		t.Fatalf("failure lines %+v; want one per transport, for request IDs %v:\n%s", lines, want, logs.String())
	}
	for _, l := range lines {
		if l.Procedure != procedure || l.Code != wire.CodeShuttingDown || l.GRPCCode != "unavailable" || l.Status != 503 || !want[l.RequestID] {
			t.Errorf("failure line %+v; want %s, %s, unavailable, 503 and a request ID of %v", l, procedure, wire.CodeShuttingDown, want)
		}
	}
}
