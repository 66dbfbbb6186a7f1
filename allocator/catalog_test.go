package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
)

// TestAllocator_Catalog: made-up tags, however many and however concurrent,
// read the store's tag list once per interval and never allocate; a tag
// created after a read is served once the interval has passed; TagStats
// never allocates.
func TestAllocator_Catalog(t *testing.T) {
	m := memStore(t, "order")
	store := &lossyStore{Store: m}
	base := time.Now()
	var offset atomic.Int64
	a := newAllocator(t, store, func(c *allocator.Config) {
		c.CatalogInterval = time.Second
		c.Now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				if _, err := a.Next(context.Background(), fmt.Sprintf("fake-%d-%d", g, i)); !errors.Is(err, allocator.ErrUnknownTag) {
					t.Errorf("err = %v, want ErrUnknownTag", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := store.tagReads.Load(); n != 1 {
		t.Fatalf("4,000 made-up tags read the catalog %d times, want 1", n)
	}
	if n := store.calls.Load(); n != 0 {
		t.Fatalf("made-up tags made %d allocations, want 0", n)
	}

	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "late", Step: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Next(context.Background(), "late"); !errors.Is(err, allocator.ErrUnknownTag) {
		t.Fatalf("within the interval: err = %v, want ErrUnknownTag from the catalog", err)
	}
	offset.Add(int64(time.Second))
	st, err := a.TagStats(context.Background(), "late")
	if err != nil || st.Tag != "late" || st.Loads != 0 || store.calls.Load() != 0 {
		t.Fatalf("TagStats = %+v, %v after %d allocations; want the tag, never loaded", st, err, store.calls.Load())
	}
	if id, err := a.Next(context.Background(), "late"); err != nil || id != 1 {
		t.Fatalf("after the interval: %d, %v", id, err)
	}
	if n := store.tagReads.Load(); n != 2 {
		t.Fatalf("catalog reads = %d, want 2", n)
	}
	if _, err := a.TagStats(context.Background(), "fake-0-0"); !errors.Is(err, allocator.ErrUnknownTag) {
		t.Fatalf("TagStats(made-up) = %v, want ErrUnknownTag", err)
	}
}

// deadlineStore records how much time each catalog read was given.
type deadlineStore struct {
	allocator.Store
	mu     sync.Mutex
	budget []time.Duration
}

func (s *deadlineStore) Tags(ctx context.Context) ([]allocator.Tag, error) {
	if d, ok := ctx.Deadline(); ok {
		s.mu.Lock()
		s.budget = append(s.budget, time.Until(d))
		s.mu.Unlock()
	}
	return s.Store.Tags(ctx)
}

// TestAllocator_CatalogReadFollowsRoundTrip: the catalog read is bounded
// by the attempt timeout as it follows the round trip, as the other store
// calls are, not by the fixed floor: at a 1 s round trip a read gets far
// more than the 100 ms floor.
func TestAllocator_CatalogReadFollowsRoundTrip(t *testing.T) {
	store := &deadlineStore{Store: memStore(t, "order")}
	rt := allocator.NewRoundTrip(0, 0)
	rt.Observe(time.Second)
	a := newAllocator(t, store, func(c *allocator.Config) {
		c.AttemptTimeout = 100 * time.Millisecond
		c.RoundTrip = rt
	})
	if _, err := a.Next(context.Background(), "order"); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	want := a.RoundTrip().FetchTimeout
	if len(store.budget) != 1 || store.budget[0] <= want/2 {
		t.Fatalf("catalog reads given %v; want one, given about the fetch timeout %v", store.budget, want)
	}
}
