package allocator_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
)

// BenchmarkAllocator_Next measures Next on a warm tag from every
// GOMAXPROCS goroutine, side by side with a bare shared atomic counter: the
// allocator's overhead (tag lookup, buffer take, prefetch check) reads as a
// ratio to the floor. Segments of 1,000,000 IDs keep loads (in memory) rare.
func BenchmarkAllocator_Next(b *testing.B) {
	b.Run("baseline-atomic-add", func(b *testing.B) {
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Add(1)
			}
		})
	})
	b.Run("warm-tag", func(b *testing.B) {
		a := warmAllocator(b, "order")
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := a.Next(ctx, "order"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// warmAllocator returns an allocator over an in-memory store whose tags
// have served one ID each.
func warmAllocator(tb testing.TB, tags ...string) *allocator.Allocator {
	tb.Helper()
	m := memstore.New()
	for _, tag := range tags {
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: tag, Step: 1_000_000}); err != nil {
			tb.Fatal(err)
		}
	}
	a := newAllocator(tb, m, nil)
	for _, tag := range tags {
		if _, err := a.Next(context.Background(), tag); err != nil {
			tb.Fatal(err)
		}
	}
	return a
}
