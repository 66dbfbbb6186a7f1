package storetest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/segment"
)

// NewAllocator returns an allocator over store for tests, closed on
// cleanup, with short retries and generous waits; mod, if not nil, changes
// its Config first.
func NewAllocator(tb testing.TB, store allocator.Store, mod func(*allocator.Config)) *allocator.Allocator {
	tb.Helper()
	cfg := allocator.Config{
		Store:    store,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryMin: time.Millisecond,
		RetryMax: 5 * time.Millisecond,
		// Generous: the uniqueness runs saturate 2 cores with -race, and
		// a bounded wait running out there is load, not a defect.
		Segment: segment.Config{WaitTimeout: 30 * time.Second, LoadTimeout: 10 * time.Second},
	}
	if mod != nil {
		mod(&cfg)
	}
	a := allocator.New(cfg)
	tb.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// Hammer takes perGoroutine IDs of tag from each allocator with goroutines
// goroutines each, all at once, and fails on any duplicate or on a
// goroutine's IDs not increasing. It returns the number of IDs taken.
func Hammer(t *testing.T, allocators []*allocator.Allocator, tag string, goroutines, perGoroutine int) int {
	t.Helper()
	results := make([][]int64, len(allocators)*goroutines)
	var wg sync.WaitGroup
	for i, a := range allocators {
		for g := range goroutines {
			wg.Go(func() {
				ids := make([]int64, 0, perGoroutine)
				for range perGoroutine {
					id, err := a.Next(context.Background(), tag)
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, id)
				}
				results[i*goroutines+g] = ids
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return 0
	}
	seen := make(map[int64]struct{}, len(results)*perGoroutine)
	for w, ids := range results {
		for j, id := range ids {
			if _, dup := seen[id]; dup {
				t.Fatalf("duplicate id %d", id)
			}
			seen[id] = struct{}{}
			if j > 0 && id <= ids[j-1] {
				t.Fatalf("goroutine %d: id %d after %d", w, id, ids[j-1])
			}
		}
	}
	if want := len(results) * perGoroutine; len(seen) != want {
		t.Fatalf("collected %d ids, want %d", len(seen), want)
	}
	return len(seen)
}
