package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/testkit/testutil"
)

// stallingStore is a memstore.Store whose first allocation commits and then
// stalls: until the caller gives up (lost: the reply is lost) or for stall
// (then it answers). Lookups fail while lookupDown is set. It records every
// request ID it is sent.
type stallingStore struct {
	*memstore.Store
	lost       bool          // the stalled reply is lost when the caller gives up
	stall      time.Duration // otherwise the reply comes after stall
	lookupDown atomic.Bool
	stalled    atomic.Bool // the first allocation returned
	calls      atomic.Int64
	mu         sync.Mutex
	first      uuid.UUID
	sent       map[uuid.UUID]int // allocations and lookups per request ID
}

func (s *stallingStore) record(id uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent == nil {
		s.sent = map[uuid.UUID]int{}
	}
	s.sent[id]++
}

func (s *stallingStore) times(id uuid.UUID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[id]
}

func (s *stallingStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	s.record(req.ID)
	s.calls.Add(1)
	seg, err := s.Store.Allocate(ctx, req)
	s.mu.Lock()
	isFirst := s.first == uuid.Nil
	if isFirst {
		s.first = req.ID
	}
	s.mu.Unlock()
	if !isFirst {
		return seg, err
	}
	defer s.stalled.Store(true)
	if s.lost {
		<-ctx.Done()
		return allocator.Segment{}, fmt.Errorf("%w: %w", allocator.ErrAmbiguous, ctx.Err())
	}
	time.Sleep(s.stall)
	return seg, err
}

func (s *stallingStore) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	s.record(id)
	s.calls.Add(1)
	if s.lookupDown.Load() {
		return allocator.Segment{}, fmt.Errorf("%w: connection reset", allocator.ErrAmbiguous)
	}
	return s.Store.Lookup(ctx, id)
}

// TestAllocator_DroppedFirstLoad: a tag's first load commits but hangs, the
// request gives up and the tag's buffer is dropped, and a new buffer serves
// from a newer range. The first range is never served: it must be counted
// and logged as abandoned, and, when a later load looks it up, be taken for
// the settled gap it is, not for a database that went back in time.
func TestAllocator_DroppedFirstLoad(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		store *stallingStore
	}{
		// The reply is lost: the request stays unsettled, and a later load
		// of the new buffer resumes it and finds the range.
		{"lost reply resumed later", &stallingStore{lost: true}},
		// The reply comes, after the dropped buffer closed: its range
		// reaches nobody.
		{"late reply", &stallingStore{stall: 200 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := c.store
			store.Store = memStore(t, "order")
			store.lookupDown.Store(true)
			var logs logLines
			a := newAllocator(t, store, func(cfg *allocator.Config) {
				cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				cfg.AttemptTimeout = 10 * time.Second
				// The first request gives up by its context, once the
				// first allocation is in flight, not by a short wait: a
				// wait of 20ms also ran out, on a busy machine, for the
				// new buffer's first load, which dropped that buffer and
				// abandoned [11, 20] as well.
				cfg.Segment.WaitTimeout = 5 * time.Second
				cfg.Segment.LoadTimeout = 300 * time.Millisecond
				cfg.Segment.MinBackoff = time.Millisecond
				cfg.Segment.MaxBackoff = time.Millisecond
			})
			giveUp, cancel := context.WithCancel(ctx)
			first := make(chan error, 1)
			go func() {
				_, err := a.Next(giveUp, "order")
				first <- err
			}()
			testutil.Eventually(t, 5*time.Second, "the first allocation", func() bool { return store.calls.Load() > 0 })
			cancel()
			if err := <-first; !errors.Is(err, allocator.ErrUnavailable) {
				t.Fatalf("first Next: %v, want ErrUnavailable", err)
			}
			// A new buffer serves from [11, 20] while the first load hangs.
			store.lookupDown.Store(false)
			var ids []int64
			deadline := time.Now().Add(5 * time.Second)
			for len(ids) == 0 {
				if id, err := a.Next(ctx, "order"); err == nil {
					ids = append(ids, id)
				} else if time.Now().After(deadline) {
					t.Fatal(err)
				}
			}
			testutil.Eventually(t, 15*time.Second, "the first load to end", store.stalled.Load)
			// Ranges of 10 switch often: should a wait run out on a busy
			// machine, the caller is told to retry, as a client would.
			deadline = time.Now().Add(15 * time.Second)
			for len(ids) < 51 {
				id, err := a.Next(ctx, "order")
				switch {
				case err == nil:
					ids = append(ids, id)
				case !errors.Is(err, allocator.ErrUnavailable) || time.Now().After(deadline):
					t.Fatal(err)
				}
			}
			for i, id := range ids {
				if id <= 10 || (i > 0 && id <= ids[i-1]) {
					t.Fatalf("ids %v: %d served from the dropped range or out of order", ids, id)
				}
			}
			testutil.Eventually(t, 15*time.Second, "the dropped range counted", func() bool { return a.Stats()[0].Abandoned >= 10 })
			st := a.Stats()[0]
			if st.Refused != 0 || st.Abandoned != 10 {
				t.Fatalf("refused %d, abandoned %d; want 0 and 10", st.Refused, st.Abandoned)
			}
			if lines := logs.with(t, "REFUSED"); len(lines) != 0 {
				t.Fatalf("false rollback alarm: %v", lines)
			}
			lines := logs.with(t, "ABANDONED ids")
			if len(lines) != 1 || lines[0]["first"] != 1.0 || lines[0]["last"] != 10.0 || lines[0]["count"] != 10.0 {
				t.Fatalf("ABANDONED lines: %v", lines)
			}
		})
	}
}

// TestAllocator_GrantedButNotVisible: an allocation commits, its reply is
// lost, and lookups cannot see it (a replica or a pooler behind): the load
// must pause between attempts, not hammer the store.
func TestAllocator_GrantedButNotVisible(t *testing.T) {
	store := &invisibleStore{Store: memStore(t, "order")}
	a := newAllocator(t, store, func(c *allocator.Config) {
		c.RetryMin, c.RetryMax = 10*time.Millisecond, 10*time.Millisecond
		c.Jitter = func(d time.Duration) time.Duration { return d }
		c.Segment.LoadTimeout = 200 * time.Millisecond
		c.Segment.MinBackoff = time.Hour
	})
	// The first ID starts the prefetch (10% of 10 used), whose reply is lost.
	if _, err := a.Next(context.Background(), "order"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the prefetch to give up", func() bool { return a.Stats()[0].LoadFailures == 1 })
	// 200ms of 10ms pauses: about 20 lookups.
	if n := store.calls.Load(); n > 60 {
		t.Fatalf("%d store calls in one 200ms load: no pause between them", n)
	}
}

// invisibleStore commits allocations, loses the second reply, and never
// finds a request by lookup.
type invisibleStore struct {
	*memstore.Store
	calls atomic.Int64
}

func (s *invisibleStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	second := s.calls.Add(1) == 2
	seg, err := s.Store.Allocate(ctx, req)
	if second && err == nil {
		return allocator.Segment{}, fmt.Errorf("%w: connection reset", allocator.ErrAmbiguous)
	}
	return seg, err
}

func (s *invisibleStore) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	s.calls.Add(1)
	return allocator.Segment{}, allocator.ErrNotFound
}

// TestAllocator_PendingExpires: an unsettled request older than half the
// segment log's retention may have lost its log row to pruning; it is
// abandoned (logged), never sent again.
func TestAllocator_PendingExpires(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	store := &stallingStore{Store: memStore(t, "order"), lost: true}
	store.lookupDown.Store(true)
	var logs logLines
	a := newAllocator(t, store, func(c *allocator.Config) {
		c.Now = clock
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		c.LogRetention = 2 * time.Hour
		c.Segment.LoadTimeout = 50 * time.Millisecond
		c.Segment.WaitTimeout = 5 * time.Second
	})
	if _, err := a.Next(context.Background(), "order"); !errors.Is(err, allocator.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	testutil.Eventually(t, 15*time.Second, "the first load to end", store.stalled.Load)
	store.mu.Lock()
	first := store.first
	store.mu.Unlock()
	sent := store.times(first)
	store.lookupDown.Store(false)
	now.Add(int64(time.Hour + time.Second))
	id, err := a.Next(context.Background(), "order")
	if err != nil || id != 11 {
		t.Fatalf("Next = %d, %v; want 11 from a new request", id, err)
	}
	if n := store.times(first); n != sent {
		t.Fatalf("the expired request was sent again (%d times, %d before)", n, sent)
	}
	if lines := logs.with(t, "ABANDONED request"); len(lines) != 1 || lines[0]["request_id"] != first.String() {
		t.Fatalf("ABANDONED request lines: %v", lines)
	}
}

// TestAllocator_NextNBounds: a count no caller can mean is refused before
// anything is taken (it used to panic allocating the result).
func TestAllocator_NextNBounds(t *testing.T) {
	m := memStore(t, "order")
	a := newAllocator(t, m, nil)
	for _, n := range []int{allocator.MaxN + 1, math.MaxInt, 1 << 62} {
		if ids, err := a.NextN(context.Background(), "order", n); err == nil || len(ids) != 0 {
			t.Fatalf("NextN(%d) = %d ids, %v; want an error", n, len(ids), err)
		}
	}
	if got := maxIDOf(t, m, "order"); got != 0 {
		t.Fatalf("max_id %d: a refused NextN allocated", got)
	}
	if ids, err := a.NextN(context.Background(), "order", 25); err != nil || len(ids) != 25 || ids[24] != 25 {
		t.Fatalf("NextN(25) = %v, %v", ids, err)
	}
}

// TestAllocator_CloseSettlesPending: a request still unsettled at Close is
// looked up once; its committed range is logged and counted as abandoned.
func TestAllocator_CloseSettlesPending(t *testing.T) {
	m := memStore(t, "order")
	store := &lossyStore{Store: m, loseAfterCommit: 1}
	store.down.Store(true)
	var logs logLines
	a := newAllocator(t, store, func(c *allocator.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		c.Segment.LoadTimeout = 30 * time.Millisecond
	})
	if _, err := a.NextN(context.Background(), "order", 1); !errors.Is(err, allocator.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	store.down.Store(false)
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines := logs.with(t, "ABANDONED ids")
	if len(lines) != 1 || lines[0]["first"] != 1.0 || lines[0]["last"] != 10.0 {
		t.Fatalf("ABANDONED lines: %v\n%s", lines, logs.String())
	}
}
