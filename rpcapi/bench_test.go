package rpcapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
)

// BenchmarkGateway_NextID is a procedure's call of the core (NextID),
// beside BenchmarkGateway_GetID, the HTTP route's (GET /id through the
// router): the two adapters of one operation, with the same access control
// and limits. Nothing runs through HTTP in process any more; the name
// stays, so that figures of before and after compare.
func BenchmarkGateway_NextID(b *testing.B) {
	svc, _ := benchServer(b)
	h := ids{svc}
	ctx := context.Background()
	req := connect.NewRequest(&idmintv1.NextIDRequest{BizTag: "order"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.NextID(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGateway_GetID(b *testing.B) {
	_, srv := benchServer(b)
	req := httptest.NewRequest(http.MethodGet, "/id?biz_tag=order", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

func benchServer(b *testing.B) (*Service, *httpapi.Server) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 100000}); err != nil {
		b.Fatal(err)
	}
	a := allocator.New(allocator.Config{Store: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b.Cleanup(func() { a.Close(context.Background()) })
	svc := New()
	srv := httpapi.NewServer(httpapi.Config{Allocator: a, RPC: svc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return svc, srv
}
