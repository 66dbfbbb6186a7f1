package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/segment"
)

// slowStore is a MemStore whose allocations take latency, as a database
// round trip would.
type slowStore struct {
	*allocator.MemStore
	latency time.Duration
}

func (s *slowStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	t := time.NewTimer(s.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return allocator.Segment{}, ctx.Err()
	}
	return s.MemStore.Allocate(ctx, req)
}

// TestClient_StarvedTag runs many callers on a tag whose ranges hold 5 IDs
// (max_step 5) from a slow store, over real HTTP: every range is gone at
// once and nearly every Next waits for the next one. A waiting caller must
// be served from the ranges that arrive while it waits, in turn, instead of
// losing each of them to callers that come later: no caller fails while
// ranges keep arriving, and none waits through more ranges than the
// callers queued ahead of it can take.
func TestClient_StarvedTag(t *testing.T) {
	const (
		callers = 64
		each    = 40
		step    = 5
	)
	m := memStore(t, step, step)
	store := &slowStore{MemStore: m, latency: 2 * time.Millisecond}
	a := allocator.New(allocator.Config{Store: store, Logger: quiet()})
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: quiet()}))
	t.Cleanup(func() {
		srv.Close()
		a.Close(context.Background())
	})

	var ranges atomic.Int64 // ranges installed in the client's buffer
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
				before := ranges.Load()
				id, err := c.Next(ctx, "order")
				seen := ranges.Load() - before
				for {
					if l := longest.Load(); seen <= l || longest.CompareAndSwap(l, seen) {
						break
					}
				}
				if err != nil {
					check.Fail(err)
					failed.Add(1)
					failedRanges.Add(seen)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				check.Ack(name, "order", id)
			}
		})
	}
	close(start)
	wg.Wait()

	t.Logf("%d callers × %d: %d ranges received, %d calls failed (%d ranges arrived during them), at most %d ranges during one call",
		callers, each, ranges.Load(), failed.Load(), failedRanges.Load(), longest.Load())
	if n := failed.Load(); n > 0 {
		t.Errorf("%d calls failed while %d ranges arrived during them; first: %v", n, failedRanges.Load(), firstErr.Load())
	}
	// Served in turn, a caller waits for the callers ahead of it, at most
	// all the others, step at a time, and the range in flight when it
	// came: ranges counted by OnLoad may lag one behind on either side.
	if bound := int64((callers+step-1)/step + 3); longest.Load() > bound {
		t.Errorf("a call waited through %d ranges; in turn it would be at most %d", longest.Load(), bound)
	}
	if r := check.Report(); !r.Valid() || r.IDs() != callers*each-failed.Load() {
		t.Errorf("IDs: %v", r)
	}
}
