package rpcapi

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
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
		a := allocator.New(allocator.Config{Store: m, Logger: discardLogger})
		b.Cleanup(func() { a.Close(context.Background()) })
		svc := New()
		httpapi.NewServer(httpapi.Config{Allocator: a, Logger: discardLogger, RPC: svc})
		benchGRPC(b, NewGRPCServer(svc, GRPCConfig{Logger: discardLogger}))
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
