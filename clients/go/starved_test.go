package client_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/starvetest"
	"github.com/idmint/idmint/testkit/toxic"
)

// TestClient_StarvedTag runs many callers on a tag whose ranges hold 5 IDs
// (max_step 5) from a slow store, over real HTTP: every range is gone at
// once and nearly every Next waits for the next one. A waiting caller must
// be served from the ranges that arrive while it waits, in turn, instead of
// losing each of them to callers that come later: no caller fails while
// ranges keep arriving (see starvetest). The lossy network puts the
// instance behind two proxies that slow its replies, with jitter, and cut
// every connection after 2 kB of them, often in the middle of one (a range
// granted, its reply lost, found again by the retry).
func TestClient_StarvedTag(t *testing.T) {
	const step = 5
	tests := []struct {
		name string
		urls func(t *testing.T, url string) []string
	}{
		{name: "direct", urls: func(_ *testing.T, url string) []string { return []string{url} }},
		{name: "lossy network", urls: func(t *testing.T, url string) []string {
			var urls []string
			for range 2 {
				p := toxic.New(t, url)
				p.Add(t, "slow", "latency", "downstream", `{"latency":2,"jitter":2}`)
				p.Add(t, "cut", "limit_data", "downstream", `{"bytes":2048}`)
				urls = append(urls, p.URL)
			}
			return urls
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &starvetest.SlowStore{Store: memStore(t, step, step), Latency: 2 * time.Millisecond}
			a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
			srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
			t.Cleanup(func() {
				srv.Close()
				a.Close(context.Background())
			})
			var ranges atomic.Int64 // ranges granted to the client's buffer
			c := newClient(t, client.Config{
				URLs: tt.urls(t, srv.URL),
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
			t.Logf("range requests sent: %d", c.Stats().Requests)
		})
	}
}
