package client_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/starvetest"
	"github.com/idmint/idmint/segment"
)

// TestClient_StarvedTag runs many callers on a tag whose ranges hold 5 IDs
// (max_step 5) from a slow store, over real HTTP: every range is gone at
// once and nearly every Next waits for the next one. A waiting caller must
// be served from the ranges that arrive while it waits, in turn, instead of
// losing each of them to callers that come later: no caller fails while
// ranges keep arriving (see starvetest).
func TestClient_StarvedTag(t *testing.T) {
	const step = 5
	store := &starvetest.SlowStore{MemStore: memStore(t, step, step), Latency: 2 * time.Millisecond}
	a := allocator.New(allocator.Config{Store: store, Logger: quiet()})
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: quiet()}))
	t.Cleanup(func() {
		srv.Close()
		a.Close(context.Background())
	})
	var ranges atomic.Int64 // ranges granted to the client's buffer
	c := newClient(t, client.Config{
		URLs: []string{srv.URL},
		Segment: segment.Config{
			WaitTimeout: time.Second,
			OnLoad: func(_ string, _ time.Duration, err error) {
				if err == nil {
					ranges.Add(1)
				}
			},
		},
	})
	starvetest.Run(t, 64, 40, step,
		func(ctx context.Context) (int64, error) { return c.Next(ctx, "order") },
		ranges.Load)
}
