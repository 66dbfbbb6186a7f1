package allocator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/segment"
)

func maxIDOf(tb testing.TB, m *memstore.Store, tag string) int64 {
	tb.Helper()
	tags, err := m.Tags(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	for _, t := range tags {
		if t.Name == tag {
			return t.MaxID
		}
	}
	tb.Fatalf("no tag %q", tag)
	return 0
}

func TestAllocator_CloseGivesBack(t *testing.T) {
	ctx := context.Background()
	fixed := func(c *allocator.Config) { c.Segment = segment.Config{Threshold: 0.5} }

	t.Run("the unused tail of the newest range goes back", func(t *testing.T) {
		m := memStore(t, "order")
		a := newAllocator(t, m, fixed)
		ids, err := a.NextN(ctx, "order", 3) // [1, 10]; the next range may be loading
		if err != nil || ids[2] != 3 {
			t.Fatalf("NextN = %v, %v", ids, err)
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if st := a.Stats()[0]; st.Abandoned != 0 || st.GivenBack < 7 || st.Issued != 3 {
			t.Fatalf("after close: abandoned %d, given back %d, issued %d; want 0, 7 or more, 3", st.Abandoned, st.GivenBack, st.Issued)
		}
		if got := maxIDOf(t, m, "order"); got != 3 {
			t.Fatalf("max_id after close = %d, want 3: the tail (and a touching next range) given back", got)
		}
		b := newAllocator(t, m, fixed)
		if id, err := b.Next(ctx, "order"); err != nil || id != 4 {
			t.Fatalf("next instance's first id = %d, %v; want 4", id, err)
		}
	})

	t.Run("an allocation by another instance makes it a no-op", func(t *testing.T) {
		m := memStore(t, "order")
		a := newAllocator(t, m, fixed)
		if _, err := a.Next(ctx, "order"); err != nil {
			t.Fatal(err)
		}
		other := newAllocator(t, m, fixed)
		if id, err := other.Next(ctx, "order"); err != nil || id <= 10 {
			t.Fatalf("other instance got %d, %v", id, err)
		}
		before := maxIDOf(t, m, "order")
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := maxIDOf(t, m, "order"); got != before {
			t.Fatalf("max_id moved from %d to %d: a give-back under another instance's range", before, got)
		}
	})
}

// TestAllocator_RollbackRepaired: the database goes back in time under a
// running instance. Its next allocation raises max_id to the highest ID it
// was granted and it serves on, above it, without a duplicate; the repair
// is counted.
func TestAllocator_RollbackRepaired(t *testing.T) {
	ctx := context.Background()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10}); err != nil {
		t.Fatal(err)
	}
	a := newAllocator(t, m, nil)
	ids, err := a.NextN(ctx, "order", 15) // ranges up to 20 or 30
	if err != nil {
		t.Fatal(err)
	}
	m.SetMaxID("order", 0) // the database went back in time
	more, err := a.NextN(ctx, "order", 100)
	if err != nil {
		t.Fatalf("after the rollback: %v", err)
	}
	seen := map[int64]bool{}
	for _, id := range append(ids, more...) {
		if seen[id] {
			t.Fatalf("id %d handed out twice", id)
		}
		seen[id] = true
	}
	st := a.Stats()[0]
	if st.Repaired != 1 || st.Refused != 0 {
		t.Fatalf("repaired %d, refused %d; want 1 and 0", st.Repaired, st.Refused)
	}
	if got := maxIDOf(t, m, "order"); got < st.Highest {
		t.Fatalf("max_id %d below the highest id granted %d", got, st.Highest)
	}
}

// giveBackBudgets records how much time each give-back was given.
type giveBackBudgets struct {
	allocator.Store
	mu               sync.Mutex
	caller, instance []time.Duration
}

func budget(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return -1 // none: unbounded
}

func (s *giveBackBudgets) GiveBackRange(ctx context.Context, id uuid.UUID, h allocator.Holder, tag string, first, last int64) (bool, error) {
	s.mu.Lock()
	s.caller = append(s.caller, budget(ctx))
	s.mu.Unlock()
	return s.Store.GiveBackRange(ctx, id, h, tag, first, last)
}

func (s *giveBackBudgets) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
	s.mu.Lock()
	s.instance = append(s.instance, budget(ctx))
	s.mu.Unlock()
	return s.Store.GiveBack(ctx, tag, first, last)
}

// TestAllocator_GiveBackBounded: a give-back holds the tag's lock in the
// store, so its time is bounded by MaxGiveBackTimeout however long the
// round trip makes the attempt timeout, or an operator set it; nearby it
// is the attempt timeout.
func TestAllocator_GiveBackBounded(t *testing.T) {
	far := allocator.NewRoundTrip(0, 0)
	far.Observe(time.Second) // twenty round trips: 20 s
	for _, tt := range []struct {
		name string
		mod  func(*allocator.Config)
		want time.Duration
	}{
		{"nearby: the attempt timeout", func(c *allocator.Config) { c.AttemptTimeout = 2 * time.Second }, 2 * time.Second},
		{"a long round trip: the ceiling", func(c *allocator.Config) { c.RoundTrip = far }, allocator.MaxGiveBackTimeout},
		{"a long attempt timeout: the ceiling", func(c *allocator.Config) { c.AttemptTimeout = time.Minute }, allocator.MaxGiveBackTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := &giveBackBudgets{Store: memStore(t, "order")}
			a := newAllocator(t, store, func(c *allocator.Config) {
				c.Segment = segment.Config{Threshold: 0.5}
				tt.mod(c)
			})
			h := allocator.NewHolder("anonymous", "key")
			rr := allocator.RangeRequest{ID: uuid.Must(uuid.NewV7()), Tag: "order", Size: 10, Holder: h}
			seg, _, err := a.GrantRange(ctx, rr)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := a.GiveBackRange(ctx, rr.ID, h, "order", seg.First+5, seg.Last); err != nil || !ok {
				t.Fatalf("GiveBackRange = %v, %v", ok, err)
			}
			if _, err := a.Next(ctx, "order"); err != nil {
				t.Fatal(err)
			}
			// Close gives the instance's tail back, under a close of its
			// own that allows far longer.
			closeCtx, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			if err := a.Close(closeCtx); err != nil {
				t.Fatal(err)
			}
			store.mu.Lock()
			defer store.mu.Unlock()
			for _, b := range []struct {
				who     string
				budgets []time.Duration
			}{{"a caller's give-back", store.caller}, {"an instance's give-back", store.instance}} {
				if len(b.budgets) == 0 {
					t.Fatalf("no %s seen", b.who)
				}
				for _, got := range b.budgets {
					if got <= tt.want/2 || got > tt.want {
						t.Fatalf("%s given %v, want %v", b.who, got, tt.want)
					}
				}
			}
		})
	}
}
