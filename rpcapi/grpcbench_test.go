package rpcapi

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idmint/idmint/testkit/testlog"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// BenchmarkGRPCServer_NextID is NextID over loopback on the grpc-go
// listener (NewGRPCServer, open mode, a memory store), beside a bare
// grpc-go server of the same service returning an atomic counter: the
// listener's own cost per call is the difference. Clients and servers share
// the process, so the ratio, not the figure, is what it tells.
func BenchmarkGRPCServer_NextID(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		gs := grpc.NewServer()
		idmintv1.RegisterIDServiceServer(gs, &bareIDs{})
		benchGRPC(b, gs)
	})
	b.Run("idmint", func(b *testing.B) {
		m := memstore.New()
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 100000}); err != nil {
			b.Fatal(err)
		}
		a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
		b.Cleanup(func() { a.Close(context.Background()) })
		svc := New()
		httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), RPC: svc})
		benchGRPC(b, NewGRPCServer(svc, GRPCConfig{Logger: testlog.Discard()}))
	})
}

// bareIDs is the reference NextID: an atomic counter.
type bareIDs struct {
	idmintv1.UnimplementedIDServiceServer
	n atomic.Int64
}

func (s *bareIDs) NextID(context.Context, *idmintv1.NextIDRequest) (*idmintv1.NextIDResponse, error) {
	return &idmintv1.NextIDResponse{Id: s.n.Add(1)}, nil
}

// benchGRPC serves gs on loopback and calls NextID from parallel
// goroutines over one connection.
func benchGRPC(b *testing.B, gs *grpc.Server) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go gs.Serve(ln)
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := idmintv1.NewIDServiceClient(conn)
	req := &idmintv1.NextIDRequest{BizTag: "order"}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.NextID(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkHTTPPort_NextID is NextID as gRPC over h2c on the HTTP port
// (httpapi's server with the service mounted, open mode, a memory store),
// beside a bare connect-go handler of the same service on net/http.
func BenchmarkHTTPPort_NextID(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.Handle(idmintv1connect.NewIDServiceHandler(&bareConnectIDs{}))
		benchHTTPPort(b, mux)
	})
	b.Run("idmint", func(b *testing.B) {
		_, srv := benchServer(b)
		benchHTTPPort(b, srv)
	})
}

// bareConnectIDs is the reference connect-go NextID: an atomic counter.
type bareConnectIDs struct {
	idmintv1connect.UnimplementedIDServiceHandler
	n atomic.Int64
}

func (s *bareConnectIDs) NextID(_ context.Context, req *connect.Request[idmintv1.NextIDRequest]) (*connect.Response[idmintv1.NextIDResponse], error) {
	return connect.NewResponse(&idmintv1.NextIDResponse{BizTag: req.Msg.GetBizTag(), Id: s.n.Add(1)}), nil
}

// benchHTTPPort serves h over h2c on loopback and calls NextID with
// connect-go's gRPC protocol from parallel goroutines.
func benchHTTPPort(b *testing.B, h http.Handler) {
	ts := httptest.NewUnstartedServer(h)
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Start()
	b.Cleanup(ts.Close)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	b.Cleanup(hc.CloseIdleConnections)
	client := idmintv1connect.NewIDServiceClient(hc, ts.URL, connect.WithGRPC())
	msg := &idmintv1.NextIDRequest{BizTag: "order"}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.NextID(context.Background(), connect.NewRequest(msg)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
