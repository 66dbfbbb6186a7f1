package allocator_test

import (
	"context"
	"sync"
	"testing"

	"github.com/idmint/idmint/allocator"
)

// hammer takes perGoroutine IDs of tag from each allocator with goroutines
// goroutines each, all at once, and fails on any duplicate or on a
// goroutine's IDs not increasing. It returns the number of IDs taken.
func hammer(t *testing.T, allocators []*allocator.Allocator, tag string, goroutines, perGoroutine int) int {
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
