package starvetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/internal/checker"
)

// Run calls next each times from each of callers goroutines, all started
// at once, and checks what they got. ranges returns how many ranges the
// buffer under test was granted so far (an OnLoad counter); step is the
// size of every range.
func Run(tb testing.TB, callers, each int, step int64, next func(context.Context) (int64, error), ranges func() int64) {
	tb.Helper()
	ctx := context.Background()
	check := checker.New()
	var (
		failed       atomic.Int64 // calls that failed
		failedRanges atomic.Int64 // ranges that arrived during failed calls
		longest      atomic.Int64 // most ranges that arrived during one call
		firstErr     atomic.Value
		wg           sync.WaitGroup
	)
	start := make(chan struct{})
	for g := range callers {
		name := fmt.Sprintf("caller%d", g)
		wg.Go(func() {
			<-start
			for range each {
				check.Attempt()
				before := ranges()
				id, err := next(ctx)
				seen := ranges() - before
				for l := longest.Load(); seen > l && !longest.CompareAndSwap(l, seen); l = longest.Load() {
				}
				if err != nil {
					check.Fail(err)
					failed.Add(1)
					failedRanges.Add(seen)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				check.Ack(name, "t", id)
			}
		})
	}
	close(start)
	wg.Wait()

	tb.Logf("%d callers × %d calls: %d ranges received, %d calls failed (%d ranges arrived during them), at most %d ranges during one call",
		callers, each, ranges(), failed.Load(), failedRanges.Load(), longest.Load())
	if n := failed.Load(); n > 0 {
		tb.Errorf("%d calls failed while %d ranges arrived during them; first: %v", n, failedRanges.Load(), firstErr.Load())
	}
	// Served in turn, a caller waits for the callers before it, at most
	// all the others, step at a time, and for the range in flight when it
	// came; a range counter read outside the buffer's lock may be one
	// behind at either end.
	if bound := (int64(callers)+step-1)/step + 3; longest.Load() > bound {
		tb.Errorf("a call waited through %d ranges; served in turn it would be at most %d", longest.Load(), bound)
	}
	if r := check.Report(); !r.Valid() || r.IDs() != int64(callers*each)-failed.Load() {
		tb.Errorf("IDs: %v", r)
	}
}

// SlowStore is a memstore.Store whose allocations take Latency, as a database
// round trip would.
type SlowStore struct {
	*memstore.Store
	Latency time.Duration
}

// Allocate waits Latency, then allocates from the memstore.Store.
func (s *SlowStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	t := time.NewTimer(s.Latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return allocator.Segment{}, ctx.Err()
	}
	return s.Store.Allocate(ctx, req)
}
