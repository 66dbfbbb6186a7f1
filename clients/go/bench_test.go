package client_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
)

// BenchmarkClient_Next measures Client.Next on a warm tag, from every
// GOMAXPROCS goroutine at once (-cpu 2: two), beside a bare shared atomic
// counter, the floor of any shared sequence. The client's ranges come from
// two instances over real PostgreSQL through loopback HTTP; roundtrips/M-ids
// is the range requests (one database allocation each) per million IDs.
//
//	go test -run '^$' -bench Client_Next -cpu 2 ./client
func BenchmarkClient_Next(b *testing.B) {
	b.Run("baseline-atomic-add", func(b *testing.B) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Add(1)
			}
		})
		reportRate(b)
	})
	b.Run("postgres", func(b *testing.B) {
		ctx := context.Background()
		store, _ := pgstore.New(b)
		if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 1000, MaxStep: 10_000_000}); err != nil {
			b.Fatal(err)
		}
		urls := []string{serve(b, store), serve(b, store)}
		c, err := client.New(ctx, client.Config{URLs: urls, Tags: []string{"order"}, Logger: testlog.Discard()})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		// Warm: let the dynamic step grow to max_step (bounded).
		for i := 0; i < 1000 && c.Stats().Tags[0].Step < 10_000_000; i++ {
			if _, err := c.NextN(ctx, "order", 100_000); err != nil {
				b.Fatal(err)
			}
		}
		before := c.Stats().Requests
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Next(ctx, "order"); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		reportRate(b)
		b.ReportMetric(float64(c.Stats().Requests-before)*1e6/float64(b.N), "roundtrips/M-ids")
	})
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "M-ids/s")
}

// serve starts an instance over store and returns its URL.
func serve(tb testing.TB, store allocator.Store) string {
	tb.Helper()
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
	tb.Cleanup(func() {
		srv.Close()
		a.Close(context.Background())
	})
	return srv.URL
}
