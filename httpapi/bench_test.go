package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idmint/idmint/testkit/testlog"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/tracing"
)

// BenchmarkServer_ID measures GET /id end to end over loopback HTTP with
// keep-alive, metrics and the access log off: the cost a client sees per ID
// when the buffers are warm (in-memory store; the store is off the hot
// path). Compare with segment's BenchmarkBuffer_Take: the gap is HTTP.
// The tracing cases wrap the handler as idmint serve does with the OTEL_*
// environment set: "plain" is tracing off (no provider, nothing wrapped),
// "tracing-unsampled" a provider whose sampler records nothing, and
// "tracing-sampled" one that records every request and exports it (to a
// no-op exporter, through the batcher).
func BenchmarkServer_ID(b *testing.B) {
	for _, bc := range []struct {
		name    string
		metrics bool
		sampler sdktrace.Sampler // nil: tracing off
	}{{"plain", false, nil}, {"metrics", true, nil},
		{"tracing-unsampled", false, sdktrace.NeverSample()}, {"tracing-sampled", false, sdktrace.AlwaysSample()}} {
		b.Run(bc.name, func(b *testing.B) {
			m := memstore.New()
			if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 100_000}); err != nil {
				b.Fatal(err)
			}
			a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
			defer a.Close(context.Background())
			cfg := httpapi.Config{Allocator: a, Logger: testlog.Discard()}
			if bc.metrics {
				cfg.Metrics = httpapi.NewMetrics()
			}
			srv := httptest.NewServer(traced(b, httpapi.NewServer(cfg), bc.sampler))
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			url := srv.URL + "/id?biz_tag=order"
			b.ReportAllocs()
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

// BenchmarkServer_IDHandler measures GET /id through the handler alone (no
// network, one goroutine), so that allocations and nanoseconds are the
// server's own: tracing off (the handler as idmint serve mounts it without
// OTEL_* variables), on but not sampled, and on and sampled.
func BenchmarkServer_IDHandler(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: tracing off
	}{{"off", nil}, {"unsampled", sdktrace.NeverSample()}, {"sampled", sdktrace.AlwaysSample()}} {
		b.Run(bc.name, func(b *testing.B) {
			m := memstore.New()
			if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 1_000_000}); err != nil {
				b.Fatal(err)
			}
			a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
			defer a.Close(context.Background())
			h := traced(b, httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}), bc.sampler)
			benchGet(b, h, httptest.NewRequest(http.MethodGet, "/id?biz_tag=order", nil))
		})
	}
}

// traced returns api as idmint serve mounts it: with sampler nil (tracing
// off) api itself, else wrapped in tracing over a provider with sampler
// that exports in batches to a no-op exporter, shut down at cleanup.
func traced(b *testing.B, api *httpapi.Server, sampler sdktrace.Sampler) http.Handler {
	b.Helper()
	if sampler == nil {
		return api
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tracing.New(tp).HTTP(api, api.Router())
}

// benchGet serves req with h b.N times, each answered 200.
func benchGet(b *testing.B, h http.Handler, req *http.Request) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}
