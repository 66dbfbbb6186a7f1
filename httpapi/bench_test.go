package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
)

// BenchmarkServer_ID measures GET /id end to end over loopback HTTP with
// keep-alive, metrics and the access log off: the cost a client sees per ID
// when the buffers are warm (in-memory store; the store is off the hot
// path). Compare with segment's BenchmarkBuffer_Take: the gap is HTTP.
func BenchmarkServer_ID(b *testing.B) {
	for _, bc := range []struct {
		name    string
		metrics bool
	}{{"plain", false}, {"metrics", true}} {
		b.Run(bc.name, func(b *testing.B) {
			m := memstore.New()
			if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 100_000}); err != nil {
				b.Fatal(err)
			}
			a := allocator.New(allocator.Config{Store: m, Logger: quiet()})
			defer a.Close(context.Background())
			cfg := httpapi.Config{Allocator: a, Logger: quiet()}
			if bc.metrics {
				cfg.Metrics = httpapi.NewMetrics()
			}
			srv := httptest.NewServer(httpapi.NewServer(cfg))
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			url := srv.URL + "/id?biz_tag=order"
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
