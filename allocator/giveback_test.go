package allocator_test

import (
	"context"
	"testing"

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
