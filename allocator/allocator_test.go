package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/storetest"
)

func newAllocator(tb testing.TB, store allocator.Store, mod func(*allocator.Config)) *allocator.Allocator {
	tb.Helper()
	return storetest.NewAllocator(tb, store, mod)
}

func memStore(tb testing.TB, tags ...string) *memstore.Store {
	tb.Helper()
	m := memstore.New()
	for _, tag := range tags {
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: tag, Step: 10}); err != nil {
			tb.Fatal(err)
		}
	}
	return m
}

func TestAllocator_Next(t *testing.T) {
	t.Run("hands out increasing ids per tag", func(t *testing.T) {
		a := newAllocator(t, memStore(t, "order", "user"), nil)
		for want := int64(1); want <= 100; want++ {
			for _, tag := range []string{"order", "user"} {
				got, err := a.Next(context.Background(), tag)
				if err != nil || got != want {
					t.Fatalf("Next(%s) = %d, %v; want %d", tag, got, err, want)
				}
			}
		}
	})

	t.Run("unknown tag", func(t *testing.T) {
		store := &countingStore{Store: memStore(t, "order")}
		a := newAllocator(t, store, func(c *allocator.Config) { c.CatalogInterval = time.Hour })
		for range 5 {
			if _, err := a.Next(context.Background(), "nope"); !errors.Is(err, allocator.ErrUnknownTag) {
				t.Fatalf("err = %v, want ErrUnknownTag", err)
			}
		}
		// The store's tag catalog answers: one read, no allocation.
		if n, reads := store.allocs.Load(), a.CatalogReads(); n != 0 || reads != 1 {
			t.Fatalf("store saw %d allocations and %d catalog reads for an unknown tag, want 0 and 1", n, reads)
		}
		if len(a.Stats()) != 0 {
			t.Fatalf("an unknown tag left a buffer behind")
		}
	})

	t.Run("a listed tag the store refuses is remembered as unknown", func(t *testing.T) {
		store := &listingStore{countingStore{Store: memStore(t, "order")}, "nope"}
		a := newAllocator(t, store, nil)
		for range 5 {
			if _, err := a.Next(context.Background(), "nope"); !errors.Is(err, allocator.ErrUnknownTag) {
				t.Fatalf("err = %v, want ErrUnknownTag", err)
			}
		}
		if n := store.allocs.Load(); n != 1 {
			t.Fatalf("store saw %d allocations for an unknown tag, want 1 (cached)", n)
		}
	})

	t.Run("invalid tag never reaches the store", func(t *testing.T) {
		store := &countingStore{Store: memStore(t)}
		a := newAllocator(t, store, nil)
		for _, tag := range []string{"", "-x", "a b", "ö", string(make([]byte, 65))} {
			if _, err := a.Next(context.Background(), tag); !errors.Is(err, allocator.ErrInvalidTag) {
				t.Errorf("Next(%q) err = %v, want ErrInvalidTag", tag, err)
			}
		}
		if store.allocs.Load() != 0 {
			t.Fatal("invalid tags reached the store")
		}
	})

	t.Run("exhausted tag", func(t *testing.T) {
		m := memstore.New()
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "big", Step: 10, Start: 1<<63 - 15}); err != nil {
			t.Fatal(err)
		}
		a := newAllocator(t, m, nil)
		ids, err := a.NextN(context.Background(), "big", 10)
		if err != nil || ids[9] != 1<<63-6 {
			t.Fatalf("NextN = %v, %v", ids, err)
		}
		if _, err := a.NextN(context.Background(), "big", 10); !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("err = %v, want ErrExhausted", err)
		}
	})

	t.Run("closed", func(t *testing.T) {
		a := newAllocator(t, memStore(t, "order"), nil)
		a.Next(context.Background(), "order")
		a.Close(context.Background())
		if _, err := a.Next(context.Background(), "order"); !errors.Is(err, allocator.ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	})
}

// TestAllocator_LostReply: the store commits the allocation but the reply is
// lost. The allocator must find the committed range by its request ID
// instead of allocating a second one.
func TestAllocator_LostReply(t *testing.T) {
	m := memstore.New()
	// step = max_step: the 100 IDs cross ten ranges, the first three lost.
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10}); err != nil {
		t.Fatal(err)
	}
	store := &lossyStore{Store: m, loseAfterCommit: 3}
	a := newAllocator(t, store, nil)
	ids, err := a.NextN(context.Background(), "order", 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("ids[%d] = %d: a lost reply cost a range (want no gap)", i, id)
		}
	}
	var recovered int64
	for _, st := range a.Stats() {
		recovered += st.Recovered
	}
	if recovered != 3 {
		t.Fatalf("recovered = %d, want 3", recovered)
	}
}

// TestAllocator_UnsettledRequestResumes: the reply is lost and the store
// stays unreachable past the load's deadline. The next load must resume the
// same request ID and serve the range it committed.
func TestAllocator_UnsettledRequestResumes(t *testing.T) {
	m := memStore(t, "order")
	store := &lossyStore{Store: m, loseAfterCommit: 1}
	store.down.Store(true) // every call after the first commit fails
	a := newAllocator(t, store, func(c *allocator.Config) {
		c.Segment.LoadTimeout = 30 * time.Millisecond
		c.Segment.MinBackoff = time.Millisecond
		c.Segment.MaxBackoff = time.Millisecond
	})
	if _, err := a.Next(context.Background(), "order"); !errors.Is(err, allocator.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	first := store.firstRequest()
	store.down.Store(false)
	time.Sleep(5 * time.Millisecond)
	id, err := a.Next(context.Background(), "order")
	if err != nil {
		t.Fatal(err)
	}
	if id != 1 {
		// A reissue under a new request ID would have served [11, 20].
		t.Fatalf("id = %d, want 1 (the range committed for the lost reply)", id)
	}
	if seg, err := m.Lookup(context.Background(), first); err != nil || seg.First != 1 {
		t.Fatalf("first request %s: %v, %v", first, seg, err)
	}
}

func TestAllocator_Concurrent(t *testing.T) {
	m := memStore(t, "a", "b")
	store := &lossyStore{Store: m, loseEvery: 7}
	var all sync.Map
	var wg sync.WaitGroup
	for inst := range 4 {
		a := newAllocator(t, store, func(c *allocator.Config) { c.Instance = fmt.Sprint("i", inst) })
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tag := []string{"a", "b"}[g%2]
				last := int64(0)
				for range 1000 {
					id, err := a.Next(context.Background(), tag)
					if err != nil {
						t.Error(err)
						return
					}
					if id <= last {
						t.Errorf("id %d after %d", id, last)
					}
					last = id
					if _, dup := all.LoadOrStore(fmt.Sprint(tag, id), true); dup {
						t.Errorf("duplicate %s %d", tag, id)
					}
				}
			}()
		}
	}
	wg.Wait()
}

// countingStore counts allocations.
type countingStore struct {
	allocator.Store
	allocs atomic.Int64
}

func (s *countingStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	s.allocs.Add(1)
	return s.Store.Allocate(ctx, req)
}

// listingStore lists a tag it does not have, as a catalog read just
// before the tag's row went away would.
type listingStore struct {
	countingStore
	ghost string
}

func (s *listingStore) Tags(ctx context.Context) ([]allocator.Tag, error) {
	tags, err := s.countingStore.Tags(ctx)
	return append(tags, allocator.Tag{Name: s.ghost}), err
}

// lossyStore commits allocations but loses some replies, as a connection
// that drops after COMMIT would.
type lossyStore struct {
	*memstore.Store
	loseAfterCommit int64 // lose the replies of the first N allocations
	loseEvery       int64 // and of every Nth allocation after that
	down            atomic.Bool
	calls           atomic.Int64
	tagsDown        atomic.Bool // Tags fails
	tagReads        atomic.Int64
	mu              sync.Mutex
	first           uuid.UUID
}

var errLost = fmt.Errorf("%w: connection reset by peer", allocator.ErrAmbiguous)

func (s *lossyStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	n := s.calls.Add(1)
	if n > 1 && s.down.Load() {
		return allocator.Segment{}, errLost
	}
	seg, err := s.Store.Allocate(ctx, req)
	if err != nil {
		return seg, err
	}
	s.mu.Lock()
	if s.first == uuid.Nil {
		s.first = req.ID
	}
	s.mu.Unlock()
	if n <= s.loseAfterCommit || (s.loseEvery > 0 && n%s.loseEvery == 0) {
		return allocator.Segment{}, errLost
	}
	return seg, nil
}

func (s *lossyStore) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	if s.down.Load() {
		return allocator.Segment{}, errLost
	}
	return s.Store.Lookup(ctx, id)
}

// Tags fails while the store is down, as every read of an unreachable
// database does.
func (s *lossyStore) Tags(ctx context.Context) ([]allocator.Tag, error) {
	s.tagReads.Add(1)
	if s.tagsDown.Load() {
		return nil, errLost
	}
	return s.Store.Tags(ctx)
}

func (s *lossyStore) firstRequest() uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// TestAllocator_OutageKeepsNoBuffers: tags asked for while the store is
// unreachable, made up or not, leave no buffer behind. A made-up tag is
// answered from the catalog of tag names while it is fresh (unknown), and
// "unavailable" once it is stale and cannot be read again, with one read
// per interval whatever the number of names; a tag that already served
// keeps its buffer.
func TestAllocator_OutageKeepsNoBuffers(t *testing.T) {
	m := memStore(t, "order")
	store := &lossyStore{Store: m}
	base := time.Now()
	var offset atomic.Int64
	a := newAllocator(t, store, func(c *allocator.Config) {
		c.Segment.LoadTimeout = 20 * time.Millisecond
		c.Segment.MinBackoff = time.Hour
		c.CatalogInterval = time.Second
		c.Now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	})
	if _, err := a.Next(context.Background(), "order"); err != nil {
		t.Fatal(err)
	}
	store.down.Store(true)
	store.tagsDown.Store(true)
	reads := store.tagReads.Load()
	for i := range 100 {
		if _, err := a.Next(context.Background(), fmt.Sprint("made-up-", i)); !errors.Is(err, allocator.ErrUnknownTag) {
			t.Fatalf("fresh catalog: err = %v, want ErrUnknownTag", err)
		}
	}
	if store.tagReads.Load() != reads {
		t.Fatal("made-up tags reached the store while the catalog was fresh")
	}

	offset.Add(int64(2 * time.Second)) // the catalog is stale now
	for i := range 100 {
		var ue *segment.UnavailableError
		if _, err := a.Next(context.Background(), fmt.Sprint("made-up-", i)); !errors.As(err, &ue) || ue.RetryAfter <= 0 {
			t.Fatalf("stale catalog, store down: err = %v, want UnavailableError with RetryAfter", err)
		}
	}
	if n := store.tagReads.Load() - reads; n != 1 {
		t.Fatalf("100 made-up tags read the catalog %d times, want 1", n)
	}
	if st := a.Stats(); len(st) != 1 || st[0].Tag != "order" {
		t.Fatalf("buffers after the outage: %d, want only order's", len(st))
	}
}

// claimingStore loses its first allocation before anything commits, and a
// stranger who read the request ID in the instance's log ("reply lost; will
// look the request up") claims it through the range API first.
type claimingStore struct {
	*memstore.Store
	mu      sync.Mutex
	claimed allocator.Segment
}

func (s *claimingStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimed.RequestID == uuid.Nil && req.Holder.IsZero() {
		stranger := req
		stranger.Instance = "stranger/client"
		stranger.Holder = allocator.NewHolder("anonymous", "a-stranger's-own-holder-key")
		seg, err := s.Store.Allocate(ctx, stranger)
		if err != nil {
			return seg, err
		}
		s.claimed = seg
		return allocator.Segment{}, errLost // the instance's own attempt: nothing committed
	}
	return s.Store.Allocate(ctx, req)
}

// TestAllocator_RequestIDClaimedByStranger: an instance's request ID, read
// from its log after a lost reply, is claimed by a caller through the range
// API before the instance's retry. The instance must serve none of that
// caller's range (it would hand those IDs out twice), and go on with a new
// request.
func TestAllocator_RequestIDClaimedByStranger(t *testing.T) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10}); err != nil {
		t.Fatal(err)
	}
	store := &claimingStore{Store: m}
	a := newAllocator(t, store, nil)
	ids, err := a.NextN(context.Background(), "order", 10)
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	claimed := store.claimed
	store.mu.Unlock()
	if claimed.RequestID == uuid.Nil {
		t.Fatal("the stranger claimed nothing: the test proves nothing")
	}
	for _, id := range ids {
		if id >= claimed.First && id <= claimed.Last {
			t.Fatalf("id %d served by the instance is in the stranger's range [%d, %d]: a duplicate", id, claimed.First, claimed.Last)
		}
	}
}
