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
