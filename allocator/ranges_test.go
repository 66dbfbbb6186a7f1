package allocator_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
)

// TestAllocator_GrantRange: a caller's range is the caller's. The instance
// never serves it, its floor does not move with it, a give-back of its tail
// does not make the instance refuse its next range, and a retry of the
// request ID gets the same range.
func TestAllocator_GrantRange(t *testing.T) {
	ctx := context.Background()
	m := memStore(t, "user")
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	a := newAllocator(t, m, nil)
	// The instance holds [1, 100]; one ID does not start its prefetch.
	if id, err := a.Next(ctx, "order"); err != nil || id != 1 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	rid := uuid.Must(uuid.NewV7())
	h := allocator.NewHolder("anonymous", "key")
	grant := func(tag string, size int64, id uuid.UUID) (allocator.Segment, bool, error) {
		return a.GrantRange(ctx, allocator.RangeRequest{ID: id, Tag: tag, Size: size, Holder: h})
	}
	seg, recovered, err := grant("order", 100, rid)
	if err != nil || recovered || seg.First != 101 || seg.Last != 200 {
		t.Fatalf("GrantRange = %+v, %v, %v; want [101, 200]", seg, recovered, err)
	}
	again, recovered, err := grant("order", 500, rid)
	if err != nil || !recovered || again.First != seg.First || again.Last != seg.Last || again.RequestID != rid {
		t.Fatalf("retry = %+v, %v, %v; want %+v again", again, recovered, err, seg)
	}
	if ok, err := a.GiveBackRange(ctx, rid, h, "order", 150, 200); err != nil || !ok {
		t.Fatalf("GiveBackRange = %v, %v", ok, err)
	}
	// The instance serves its own range, then the next one from 150 up:
	// never an ID of [101, 149], and no refusal.
	seen := map[int64]bool{1: true}
	for range 120 {
		id, err := a.Next(ctx, "order")
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] || (id >= 101 && id <= 149) {
			t.Fatalf("id %d: served twice or from the caller's range", id)
		}
		seen[id] = true
	}
	if st, _ := a.TagStats(ctx, "order"); st.Refused != 0 || st.Current == nil || st.Current.First != 150 {
		t.Fatalf("stats %+v: want no refusal, a range from 150", st)
	}

	t.Run("a request ID is one tag's", func(t *testing.T) {
		if _, _, err := grant("user", 0, rid); !errors.Is(err, allocator.ErrRequestConflict) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a database behind the instance's floor is raised to it first", func(t *testing.T) {
		st, err := a.TagStats(ctx, "order")
		if err != nil {
			t.Fatal(err)
		}
		m.SetMaxID("order", 50)
		seg, _, err := grant("order", 0, uuid.Must(uuid.NewV7()))
		if err != nil || !seg.Repaired || seg.First <= st.Highest {
			t.Fatalf("GrantRange = %+v, %v; want a repaired range above %d", seg, err, st.Highest)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for _, err := range []error{
			func() error { _, _, err := grant("order", 0, uuid.Nil); return err }(),
			func() error { _, _, err := grant("order", -1, uuid.Must(uuid.NewV7())); return err }(),
			func() error { _, _, err := grant("no such", 0, uuid.Must(uuid.NewV7())); return err }(),
			func() error { _, err := a.GiveBackRange(ctx, rid, h, "order", 5, 4); return err }(),
			func() error {
				_, _, err := a.GrantRange(ctx, allocator.RangeRequest{ID: uuid.Must(uuid.NewV7()), Tag: "order"}) // no holder
				return err
			}(),
			func() error {
				_, _, err := a.GrantRange(ctx, allocator.RangeRequest{ID: uuid.Must(uuid.NewV7()), Tag: "order", Holder: h, Floor: -1})
				return err
			}(),
			func() error { _, err := a.GiveBackRange(ctx, rid, allocator.Holder{}, "order", 150, 200); return err }(),
		} {
			if err == nil {
				t.Error("accepted")
			}
		}
	})
	t.Run("closed", func(t *testing.T) {
		a.Close(ctx)
		if _, _, err := grant("order", 0, uuid.Must(uuid.NewV7())); !errors.Is(err, allocator.ErrClosed) {
			t.Fatalf("err = %v", err)
		}
	})
}
