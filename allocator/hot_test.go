package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/segment"
)

// TestAllocator_HotTags checks the lock-free path over both shapes of the
// copy of the buffers (a few tags, many tags): every tag hands out its own
// increasing IDs, and NextRanges agrees with Next.
func TestAllocator_HotTags(t *testing.T) {
	for _, n := range []int{1, 8, 9, 50} {
		t.Run(fmt.Sprintf("%d tags", n), func(t *testing.T) {
			tags := make([]string, n)
			for i := range tags {
				tags[i] = fmt.Sprintf("t%d", i)
			}
			a := newAllocator(t, memStore(t, tags...), nil)
			ctx := context.Background()
			last := map[string]int64{}
			for round := range 30 {
				for _, tag := range tags {
					id, err := a.Next(ctx, tag)
					if err != nil || id <= last[tag] {
						t.Fatalf("round %d: Next(%s) = %d, %v after %d", round, tag, id, err, last[tag])
					}
					last[tag] = id
					rs, err := a.NextRanges(ctx, tag, 15, nil)
					if err != nil || len(rs) == 0 || rs[0].First <= id {
						t.Fatalf("NextRanges(%s) = %v, %v after %d", tag, rs, err, id)
					}
					total := int64(0)
					for _, r := range rs {
						total += r.Len()
						last[tag] = r.Last
					}
					if total != 15 {
						t.Fatalf("NextRanges(%s) = %v: %d ids", tag, rs, total)
					}
				}
			}
		})
	}
}

// flakyTagStore answers "unknown tag" for one tag while gone is set, as a
// store whose tag was deleted.
type flakyTagStore struct {
	*memstore.Store
	gone atomic.Bool
}

func (s *flakyTagStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	if s.gone.Load() {
		return allocator.Segment{}, fmt.Errorf("%w: %q", allocator.ErrUnknownTag, req.Tag)
	}
	return s.Store.Allocate(ctx, req)
}

// TestAllocator_HotTagForgotten checks that a warm tag whose buffer is
// dropped (its tag went unknown) leaves the lock-free copy at once: once the
// tag is known again it gets a new buffer, not the closed one.
func TestAllocator_HotTagForgotten(t *testing.T) {
	store := &flakyTagStore{Store: memStore(t, "order")}
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	a := newAllocator(t, store, func(c *allocator.Config) {
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
		c.UnknownTTL = time.Second
	})
	ctx := context.Background()
	for range 5 { // warm, and published in the copy
		if _, err := a.Next(ctx, "order"); err != nil {
			t.Fatal(err)
		}
	}
	store.gone.Store(true)
	var err error
	for i := 0; i < 100 && !errors.Is(err, allocator.ErrUnknownTag); i++ {
		_, err = a.Next(ctx, "order")
	}
	if !errors.Is(err, allocator.ErrUnknownTag) {
		t.Fatalf("tag gone from the store: Next = %v", err)
	}
	store.gone.Store(false)
	now.Add(int64(2 * time.Second))
	if id, err := a.Next(ctx, "order"); err != nil {
		t.Fatalf("tag back, TTL over: Next = %d, %v", id, err)
	}
	// The ID must come from a new buffer, the one the allocator holds, not
	// from the dropped one through a stale copy.
	st := a.Stats()
	if len(st) != 1 || st[0].Tag != "order" || st[0].Issued != 1 {
		t.Fatalf("tag back: stats %+v; want the new buffer with the one ID", st)
	}
}

// TestAllocator_NextAllocs checks that Next on a warm tag allocates nothing.
func TestAllocator_NextAllocs(t *testing.T) {
	a := warmAllocator(t, "order")
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { a.Next(ctx, "order") }); n != 0 {
		t.Fatalf("Next allocates %.1f times per ID", n)
	}
}

// maxBytesPerTag bounds the heap one warm tag costs (its buffer with two
// segments, the allocator's maps, the store's rows): docs/performance.md quotes it.
const maxBytesPerTag = 3 << 10

// TestAllocator_MemoryPerTag warms 10,000 tags and measures the heap they
// take, after a collection, against maxBytesPerTag.
func TestAllocator_MemoryPerTag(t *testing.T) {
	if testing.Short() {
		t.Skip("warms 10,000 tags")
	}
	const tags = 10_000
	m := memstore.New()
	names := make([]string, tags)
	for i := range names {
		names[i] = fmt.Sprintf("tag%05d", i)
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: names[i], Step: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	a := newAllocator(t, m, func(c *allocator.Config) { c.Segment = segment.Config{} })
	ctx := context.Background()
	before := heap()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < tags; i += 4 {
				if _, err := a.Next(ctx, names[i]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	per := (heap() - before) / tags
	t.Logf("%d bytes of heap per warm tag", per)
	if per > maxBytesPerTag {
		t.Fatalf("a warm tag costs %d bytes of heap, over the documented %d", per, maxBytesPerTag)
	}
	runtime.KeepAlive(a)
}

func heap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
