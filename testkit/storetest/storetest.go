package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testutil"
)

// Store is what the contract tests: an allocator.Store, and a way for the
// test to set a tag's max_id behind its back (MaxIDSetter).
type Store interface {
	allocator.Store
	MaxIDSetter
}

// Run runs the contract against stores returned by open, one fresh store
// per subtest.
func Run(t *testing.T, open func(t *testing.T) Store) {
	t.Run("ranges are consecutive and bounded by step and max_step", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 50})
		for _, w := range []struct{ size, first, last int64 }{
			{0, 1, 10},      // the tag's step
			{5, 11, 20},     // below step: step
			{30, 21, 50},    // within bounds
			{1000, 51, 100}, // above max_step: max_step
		} {
			seg, err := s.Allocate(t.Context(), NewRequest("order", w.size))
			if err != nil {
				t.Fatal(err)
			}
			if seg.First != w.first || seg.Last != w.last || seg.Step != 10 || seg.MaxStep != 50 || seg.Tag != "order" {
				t.Fatalf("size %d: got %+v, want [%d, %d], step 10, max_step 50", w.size, seg, w.first, w.last)
			}
		}
		if got := maxID(t, s, "order"); got != 100 {
			t.Fatalf("max_id = %d, want 100", got)
		}
	})

	t.Run("without max_step the default maximum applies", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		seg, err := s.Allocate(t.Context(), NewRequest("order", math.MaxInt64))
		if n := seg.Last - seg.First + 1; err != nil || n != segment.DefaultMaxStep || seg.MaxStep != 0 {
			t.Fatalf("got %+v (%d ids), %v; want %d ids", seg, n, err, segment.DefaultMaxStep)
		}
	})

	t.Run("tags are independent and start where asked", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		createTag(t, s, allocator.TagSpec{Name: "user", Step: 5, Start: 1000})
		o, err1 := s.Allocate(t.Context(), NewRequest("order", 0))
		u, err2 := s.Allocate(t.Context(), NewRequest("user", 0))
		if err1 != nil || err2 != nil || o.First != 1 || u.First != 1000 || u.Last != 1004 {
			t.Fatalf("order %+v %v, user %+v %v", o, err1, u, err2)
		}
	})

	t.Run("unknown tag", func(t *testing.T) {
		s := open(t)
		if _, err := s.Allocate(t.Context(), NewRequest("nope", 0)); !errors.Is(err, allocator.ErrUnknownTag) {
			t.Fatalf("err = %v, want ErrUnknownTag", err)
		}
		if tags, err := s.Tags(t.Context()); err != nil || len(tags) != 0 {
			t.Fatalf("an unknown tag was created: %+v, %v", tags, err)
		}
	})

	t.Run("a request ID is granted once", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		req := NewRequest("order", 0)
		first, err := s.Allocate(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Allocate(t.Context(), req); !errors.Is(err, allocator.ErrAlreadyGranted) {
			t.Fatalf("retry err = %v, want ErrAlreadyGranted", err)
		}
		if got := maxID(t, s, "order"); got != first.Last {
			t.Fatalf("the retry moved max_id from %d to %d", first.Last, got)
		}
		got, err := s.Lookup(t.Context(), req.ID)
		if err != nil || got != first {
			t.Fatalf("Lookup = %+v, %v; want %+v", got, err, first)
		}
		if _, err := s.Lookup(t.Context(), uuid.Must(uuid.NewV7())); !errors.Is(err, allocator.ErrNotFound) {
			t.Fatalf("Lookup of an unknown request: %v, want ErrNotFound", err)
		}
	})

	t.Run("concurrent retries of one request: one grant", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		req := NewRequest("order", 0)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { _, errs[i] = s.Allocate(t.Context(), req) })
		}
		wg.Wait()
		granted := 0
		for _, err := range errs {
			switch {
			case err == nil:
				granted++
			case !errors.Is(err, allocator.ErrAlreadyGranted):
				t.Fatalf("unexpected error: %v", err)
			}
		}
		if granted != 1 || maxID(t, s, "order") != 10 {
			t.Fatalf("granted %d times, max_id %d; want once, 10", granted, maxID(t, s, "order"))
		}
	})

	t.Run("overflow is refused, never wrapped", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "big", Step: 100, Start: math.MaxInt64 - 149})
		seg, err := s.Allocate(t.Context(), NewRequest("big", 0))
		if err != nil || seg.Last != math.MaxInt64-50 {
			t.Fatalf("first: %+v, %v", seg, err)
		}
		for _, size := range []int64{0, math.MaxInt64} {
			if _, err := s.Allocate(t.Context(), NewRequest("big", size)); !errors.Is(err, allocator.ErrExhausted) {
				t.Fatalf("size %d: err = %v, want ErrExhausted", size, err)
			}
		}
		if got := maxID(t, s, "big"); got != seg.Last {
			t.Fatalf("a refused allocation moved max_id from %d to %d", seg.Last, got)
		}
		// The last ID, exactly: a segment may end on 2^63-1.
		if _, err := s.SetStep(t.Context(), "big", 50, 0); err != nil {
			t.Fatal(err)
		}
		if seg, err := s.Allocate(t.Context(), NewRequest("big", 0)); err != nil || seg.Last != math.MaxInt64 {
			t.Fatalf("last segment: %+v, %v; want one ending at 2^63-1", seg, err)
		}
	})

	t.Run("below the instance's floor max_id is raised to it", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		req := NewRequest("order", 0)
		req.Floor = 500 // this instance was granted up to 500: the store went back in time
		seg, err := s.Allocate(t.Context(), req)
		if err != nil || seg.First != 501 || seg.Last != 510 || !seg.Repaired || seg.FoundMaxID != 0 {
			t.Fatalf("below the floor: %+v, %v; want [501, 510], repaired from 0", seg, err)
		}
		if got := maxID(t, s, "order"); got != 510 {
			t.Fatalf("max_id = %d, want 510", got)
		}
		// At or below max_id the floor changes nothing: never lowers it.
		for _, floor := range []int64{510, 0, 300} {
			req = NewRequest("order", 0)
			req.Floor = floor
			prev := maxID(t, s, "order")
			if seg, err := s.Allocate(t.Context(), req); err != nil || seg.First != prev+1 || seg.Repaired {
				t.Fatalf("floor %d at max_id %d: %+v, %v", floor, prev, seg, err)
			}
		}
		// A floor too close to 2^63-1 to grant above: nothing moves.
		req = NewRequest("order", 0)
		req.Floor = math.MaxInt64 - 5
		if _, err := s.Allocate(t.Context(), req); !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("floor near 2^63-1: %v, want ErrExhausted", err)
		}
		if got := maxID(t, s, "order"); got != 540 {
			t.Fatalf("an exhausted allocation moved max_id to %d", got)
		}
	})

	t.Run("a caller's claimed floor raises max_id, by a bounded lead", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		req := NewRequest("order", 0)
		req.ClaimedFloor, req.MaxLead = 500, allocator.MaxClaimedLead // a client was granted up to 500: the store went back in time
		if seg, err := s.Allocate(t.Context(), req); err != nil || seg.First != 501 || !seg.Repaired || seg.Lead != 500 || seg.FoundMaxID != 0 {
			t.Fatalf("claimed floor 500: %+v, %v; want [501, 510], repaired, a lead of 500 from max_id 0", seg, err)
		}
		// A lie (or a client far ahead) costs a gap of at most the lead,
		// however large a lead the caller has.
		for _, above := range []int64{-1, allocator.MaxClaimedLead + 1} {
			prev := maxID(t, s, "order")
			claimed := int64(math.MaxInt64)
			if above > 0 {
				claimed = prev + above
			}
			req = NewRequest("order", 0)
			req.ClaimedFloor, req.MaxLead = claimed, math.MaxInt64
			seg, err := s.Allocate(t.Context(), req)
			if want := prev + allocator.MaxClaimedLead + 1; err != nil || seg.First != want || !seg.Repaired || seg.Lead != allocator.MaxClaimedLead || seg.FoundMaxID != prev {
				t.Fatalf("claimed floor %d at max_id %d: %+v, %v; want a range from %d, a lead of 2^32", claimed, prev, seg, err, want)
			}
		}
		// The instance's own floor is not bounded, and is no lead.
		req = NewRequest("order", 0)
		req.Floor, req.ClaimedFloor = math.MaxInt64-100, 1
		if seg, err := s.Allocate(t.Context(), req); err != nil || seg.First != math.MaxInt64-99 || seg.Lead != 0 {
			t.Fatalf("instance floor near 2^63-1: %+v, %v", seg, err)
		}
	})

	t.Run("a claimed floor's lead is bounded by the request's, and refused without one", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		mustAllocate(t, s, NewRequest("order", 0)) // max_id 10
		claim := func(floor, instanceFloor, lead int64) (allocator.Segment, error) {
			t.Helper()
			req := NewRequest("order", 0)
			req.ClaimedFloor, req.Floor, req.MaxLead = floor, instanceFloor, lead
			return s.Allocate(t.Context(), req)
		}
		// Far ahead, with a lead of 100: raised by 100 exactly.
		if seg, err := claim(math.MaxInt64, 0, 100); err != nil || seg.First != 111 || seg.Lead != 100 || seg.FoundMaxID != 10 || !seg.Repaired {
			t.Fatalf("a claim with a lead of 100 at max_id 10: %+v, %v; want [111, 120], lead 100", seg, err)
		}
		// Nearer than the lead: raised to the claim, the lead is what it took.
		if seg, err := claim(150, 0, 100); err != nil || seg.First != 151 || seg.Lead != 30 {
			t.Fatalf("a claim 30 above max_id 120 with a lead of 100: %+v, %v; want [151, 160], lead 30", seg, err)
		}
		// The lead counts above the instance's floor, which costs the
		// caller nothing.
		if seg, err := claim(300, 200, 50); err != nil || seg.First != 251 || seg.Lead != 50 || seg.FoundMaxID != 160 {
			t.Fatalf("a claim above the instance floor 200 at max_id 160 with a lead of 50: %+v, %v; want [251, 260], lead 50", seg, err)
		}
		// Honest claims, at or below max_id (or the instance's floor),
		// need no lead and take none.
		for _, c := range []struct{ floor, instance int64 }{{260, 0}, {1, 0}, {0, 0}, {400, 400}} {
			prev := maxID(t, s, "order")
			want := max(prev, c.instance) + 1
			if seg, err := claim(c.floor, c.instance, 0); err != nil || seg.First != want || seg.Lead != 0 {
				t.Fatalf("claim %d, instance floor %d at max_id %d without a lead: %+v, %v; want a range from %d, no lead", c.floor, c.instance, prev, seg, err, want)
			}
		}
		// A claim above max_id without a lead is refused and changes
		// nothing: no max_id moved, no request logged.
		before := maxID(t, s, "order")
		for _, lead := range []int64{0, -5} {
			req := NewRequest("order", 0)
			req.ClaimedFloor, req.MaxLead = before+1, lead
			if _, err := s.Allocate(t.Context(), req); !errors.Is(err, allocator.ErrFloorBudget) {
				t.Fatalf("a claim above max_id with lead %d: %v, want ErrFloorBudget", lead, err)
			}
			if _, err := s.Lookup(t.Context(), req.ID); !errors.Is(err, allocator.ErrNotFound) {
				t.Fatalf("the refused request: lookup %v, want ErrNotFound", err)
			}
		}
		if got := maxID(t, s, "order"); got != before {
			t.Fatalf("refused claims moved max_id from %d to %d", before, got)
		}
	})

	t.Run("concurrent allocations with a floor: one repair, no overlap", func(t *testing.T) {
		const goroutines, each, floor = 8, 10, 1000
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		var (
			mu       sync.Mutex
			all      []allocator.Segment
			repaired int
			wg       sync.WaitGroup
		)
		for range goroutines {
			wg.Go(func() {
				for range each {
					req := NewRequest("order", 0)
					req.Floor = floor
					seg, err := s.Allocate(t.Context(), req)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					all = append(all, seg)
					if seg.Repaired {
						repaired++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		slices.SortFunc(all, func(a, b allocator.Segment) int { return cmp.Compare(a.First, b.First) })
		next := int64(floor + 1)
		for _, seg := range all {
			if seg.First != next {
				t.Fatalf("segment %+v: want it to start at %d (overlap or hole)", seg, next)
			}
			next = seg.Last + 1
		}
		if repaired != 1 || maxID(t, s, "order") != next-1 {
			t.Fatalf("%d repairs, max_id %d; want 1 and %d", repaired, maxID(t, s, "order"), next-1)
		}
	})

	t.Run("give back only the newest range", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		older, _ := s.Allocate(t.Context(), NewRequest("order", 0))
		newest, _ := s.Allocate(t.Context(), NewRequest("order", 0))
		if done, err := s.GiveBack(t.Context(), "order", older.First+3, older.Last); err != nil || done {
			t.Fatalf("gave back under a newer range: %v, %v", done, err)
		}
		if done, err := s.GiveBack(t.Context(), "order", newest.First+3, newest.Last); err != nil || !done {
			t.Fatalf("GiveBack of the newest tail = %v, %v", done, err)
		}
		if got := maxID(t, s, "order"); got != newest.First+2 {
			t.Fatalf("max_id = %d, want %d", got, newest.First+2)
		}
		if _, err := s.GiveBack(t.Context(), "order", 5, 4); err == nil {
			t.Fatal("accepted an empty range")
		}
	})

	t.Run("give back a request's tail: once, and never under another grant", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 5})
		createTag(t, s, allocator.TagSpec{Name: "user", Step: 10})
		if _, err := s.Allocate(t.Context(), NewRequest("order", 5)); err != nil {
			t.Fatal(err)
		}
		own := NewRequest("order", 10)
		own.Holder = allocator.NewHolder("anonymous", "the holder's key")
		seg, err := s.Allocate(t.Context(), own)
		if err != nil {
			t.Fatal(err)
		}
		giveBack := func(id uuid.UUID, tag string, first, last int64) bool {
			t.Helper()
			done, err := s.GiveBackRange(t.Context(), id, own.Holder, tag, first, last)
			if err != nil {
				t.Fatal(err)
			}
			return done
		}
		for _, c := range []struct {
			name        string
			id          uuid.UUID
			tag         string
			first, last int64
		}{
			{"another request's id", uuid.Must(uuid.NewV7()), "order", seg.First + 5, seg.Last},
			{"another tag", own.ID, "user", seg.First + 5, seg.Last},
			{"not the range's tail", own.ID, "order", seg.First + 5, seg.Last - 1},
			{"more than the range", own.ID, "order", seg.First - 1, seg.Last},
		} {
			if giveBack(c.id, c.tag, c.first, c.last) {
				t.Fatalf("%s: given back", c.name)
			}
		}
		if !giveBack(own.ID, "order", seg.First+5, seg.Last) {
			t.Fatal("the request's own tail was not given back")
		}
		if got := maxID(t, s, "order"); got != seg.First+4 {
			t.Fatalf("max_id = %d, want %d", got, seg.First+4)
		}
		// The tail goes to the next request, and its range ends where the
		// given-back one did (ABA): a repeated give-back must not take it.
		next, err := s.Allocate(t.Context(), NewRequest("order", 5))
		if err != nil || next.First != seg.First+5 || next.Last != seg.Last {
			t.Fatalf("next = %+v, %v", next, err)
		}
		if giveBack(own.ID, "order", seg.First+5, seg.Last) {
			t.Fatal("a repeated give-back took back IDs granted to another request")
		}
	})

	t.Run("a caller's range is held by its principal and holder key", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		inst := mustAllocate(t, s, NewRequest("order", 10)) // an instance's own: [1, 10]
		h := allocator.NewHolder("token:alice", "alice's key")
		own := NewRequest("order", 20)
		own.Holder = h
		seg := mustAllocate(t, s, own) // [11, 30]
		if got, err := s.Lookup(t.Context(), own.ID); err != nil || got.Holder != h || seg.Holder != h {
			t.Fatalf("Lookup = %+v, %v; the log must keep the holder %v", got, err, h)
		}
		if got, err := s.Lookup(t.Context(), inst.RequestID); err != nil || !got.Holder.IsZero() {
			t.Fatalf("Lookup of an instance's segment = %+v, %v; want no holder", got, err)
		}
		// Every other guard passes (max_id ends the range, nothing above
		// it): only the holder check refuses these.
		for _, c := range []struct {
			name string
			h    allocator.Holder
		}{
			{"another holder key", allocator.NewHolder("token:alice", "a guess")},
			{"another principal with the key", allocator.NewHolder("token:mallory", "alice's key")},
			{"no holder", allocator.Holder{}},
		} {
			done, err := s.GiveBackRange(t.Context(), own.ID, c.h, "order", 21, 30)
			if done || !errors.Is(err, allocator.ErrNotHolder) {
				t.Fatalf("%s: give back = %v, %v; want ErrNotHolder", c.name, done, err)
			}
			if got := maxID(t, s, "order"); got != 30 {
				t.Fatalf("%s: max_id %d, want 30: a refused give-back changed the tag", c.name, got)
			}
		}
		if done, err := s.GiveBackRange(t.Context(), own.ID, h, "order", 21, 30); err != nil || !done {
			t.Fatalf("the holder's give-back = %v, %v", done, err)
		}
		// An instance's live segment, the newest: no caller holds it.
		live := mustAllocate(t, s, NewRequest("order", 10)) // [21, 30]
		for _, c := range []allocator.Holder{h, {}} {
			if done, err := s.GiveBackRange(t.Context(), live.RequestID, c, "order", 22, 30); done || !errors.Is(err, allocator.ErrNotHolder) {
				t.Fatalf("give back of an instance's segment as %v = %v, %v; want ErrNotHolder", c, done, err)
			}
		}
		if got := maxID(t, s, "order"); got != 30 {
			t.Fatalf("max_id %d, want 30: an instance's segment was given back", got)
		}
	})

	t.Run("a lookup keeps only what was not given back", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		own := NewRequest("order", 100)
		own.Holder = allocator.NewHolder("anonymous", "key")
		mustAllocate(t, s, own) // [1, 100]
		if done, err := s.GiveBackRange(t.Context(), own.ID, own.Holder, "order", 51, 100); err != nil || !done {
			t.Fatalf("GiveBackRange = %v, %v", done, err)
		}
		if got, err := s.Lookup(t.Context(), own.ID); err != nil || got.First != 1 || got.Last != 50 {
			t.Fatalf("Lookup after the tail [51, 100] went back = %+v, %v; want [1, 50]", got, err)
		}
		// An instance's segment, given back in part, then one in full.
		part := mustAllocate(t, s, NewRequest("order", 10)) // [51, 60]
		if done, err := s.GiveBack(t.Context(), "order", 55, 60); err != nil || !done {
			t.Fatalf("GiveBack = %v, %v", done, err)
		}
		if got, err := s.Lookup(t.Context(), part.RequestID); err != nil || got.First != 51 || got.Last != 54 {
			t.Fatalf("Lookup = %+v, %v; want [51, 54]", got, err)
		}
		all := mustAllocate(t, s, NewRequest("order", 10)) // [55, 64]
		if done, err := s.GiveBack(t.Context(), "order", 55, 64); err != nil || !done {
			t.Fatalf("GiveBack = %v, %v", done, err)
		}
		if got, err := s.Lookup(t.Context(), all.RequestID); !errors.Is(err, allocator.ErrGivenBack) || got.First != 55 {
			t.Fatalf("Lookup of a range given back in full = %+v, %v; want ErrGivenBack", got, err)
		}
	})

	t.Run("a retried grant is its holder's alone, without what it gave back", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		a := allocator.New(allocator.Config{Store: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		defer a.Close(context.Background())
		ctx := t.Context()
		h := allocator.NewHolder("anonymous", "key a")
		rr := allocator.RangeRequest{ID: uuid.Must(uuid.NewV7()), Tag: "order", Size: 20, Holder: h}
		if seg, recovered, err := a.GrantRange(ctx, rr); err != nil || recovered || seg.First != 1 || seg.Last != 20 {
			t.Fatalf("GrantRange = %+v, %v, %v", seg, recovered, err)
		}
		refused := func(what string, r allocator.RangeRequest) {
			t.Helper()
			before := maxID(t, s, "order")
			if seg, _, err := a.GrantRange(ctx, r); !errors.Is(err, allocator.ErrNotHolder) {
				t.Fatalf("%s: GrantRange = %+v, %v; want ErrNotHolder", what, seg, err)
			}
			if got := maxID(t, s, "order"); got != before {
				t.Fatalf("%s: max_id moved from %d to %d", what, before, got)
			}
		}
		for _, other := range []allocator.Holder{allocator.NewHolder("anonymous", "key b"), allocator.NewHolder("token:x", "key a")} {
			r := rr
			r.Holder = other
			refused("a retry as "+other.String(), r)
		}
		if done, err := a.GiveBackRange(ctx, rr.ID, h, "order", 11, 20); err != nil || !done {
			t.Fatalf("GiveBackRange = %v, %v", done, err)
		}
		// The tail went back: the holder's retry gets what it kept.
		if seg, recovered, err := a.GrantRange(ctx, rr); err != nil || !recovered || seg.First != 1 || seg.Last != 10 {
			t.Fatalf("retry after a give-back = %+v, %v, %v; want [1, 10] recovered", seg, recovered, err)
		}
		inst := mustAllocate(t, s, NewRequest("order", 10)) // an instance's own: [11, 20]
		r := rr
		r.ID = inst.RequestID
		refused("a caller presenting an instance's request id", r)
		whole := allocator.RangeRequest{ID: uuid.Must(uuid.NewV7()), Tag: "order", Size: 10, Holder: h}
		seg, _, err := a.GrantRange(ctx, whole)
		if err != nil {
			t.Fatal(err)
		}
		if done, err := a.GiveBackRange(ctx, whole.ID, h, "order", seg.First, seg.Last); err != nil || !done {
			t.Fatalf("GiveBackRange of a whole range = %v, %v", done, err)
		}
		if seg, _, err := a.GrantRange(ctx, whole); !errors.Is(err, allocator.ErrGivenBack) {
			t.Fatalf("retry after a give-back of all = %+v, %v; want ErrGivenBack", seg, err)
		}
		r = whole
		r.Holder = allocator.NewHolder("anonymous", "key b")
		refused("a stranger's retry of a range given back", r)
	})

	t.Run("a give-back is refused while another request keeps ids above its first", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		own := NewRequest("order", 100)
		own.Holder = allocator.NewHolder("anonymous", "key")
		mustAllocate(t, s, own)                               // a client's [1, 100]
		other := mustAllocate(t, s, NewRequest("order", 100)) // an instance serving [101, 200]
		// An operator restores the tags table from a backup taken after the
		// client's grant; the segment log survived. max_id ends the
		// client's range again, and its tail is its own, unreturned: only
		// the log's other row, which keeps IDs above first, says no.
		s.SetMaxID("order", 100)
		if done, err := s.GiveBackRange(t.Context(), own.ID, own.Holder, "order", 51, 100); err != nil || done {
			t.Fatalf("give back [51, 100] with [%d, %d] kept by another request = %v, %v; want refused", other.First, other.Last, done, err)
		}
		if got := maxID(t, s, "order"); got != 100 {
			t.Fatalf("max_id %d, want 100", got)
		}
		if got, err := s.Lookup(t.Context(), own.ID); err != nil || got.Last != 100 {
			t.Fatalf("Lookup = %+v, %v; want the whole range kept", got, err)
		}
	})

	t.Run("a give-back is refused while another request keeps ids inside its tail", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		own := NewRequest("order", 100)
		own.Holder = allocator.NewHolder("anonymous", "key")
		mustAllocate(t, s, own) // a client's [1, 100]
		// A restore takes max_id back to 50 under a surviving log, and an
		// instance is granted [51, 100]: inside the client's tail, ending
		// where it ends. max_id ends the client's range again and nothing
		// in the log lies above 100: only the instance's row, which keeps
		// the tail's IDs, says no.
		s.SetMaxID("order", 50)
		other := mustAllocate(t, s, NewRequest("order", 50))
		if other.First != 51 || other.Last != 100 {
			t.Fatalf("the instance's segment = [%d, %d], want [51, 100]: the scenario proves nothing", other.First, other.Last)
		}
		if done, err := s.GiveBackRange(t.Context(), own.ID, own.Holder, "order", 51, 100); err != nil || done {
			t.Fatalf("give back [51, 100] with [%d, %d] kept by another request = %v, %v; want refused", other.First, other.Last, done, err)
		}
		if got := maxID(t, s, "order"); got != 100 {
			t.Fatalf("max_id %d, want 100: the instance's [51, 100] would be granted again", got)
		}
		if got, err := s.Lookup(t.Context(), other.RequestID); err != nil || got.First != 51 || got.Last != 100 {
			t.Fatalf("Lookup of the instance's segment = %+v, %v; want [51, 100] kept", got, err)
		}
	})

	t.Run("a range given back in full keeps nothing: the tail before it goes back too", func(t *testing.T) {
		// A client closing gives back its next range, unused, then the
		// tail of its current one, which touches it (segment.Set.Close).
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10})
		holder := allocator.NewHolder("anonymous", "key")
		cur, next := NewRequest("order", 10), NewRequest("order", 10)
		cur.Holder, next.Holder = holder, holder
		mustAllocate(t, s, cur)  // [1, 10], served up to 4
		mustAllocate(t, s, next) // [11, 20], unused
		if done, err := s.GiveBackRange(t.Context(), next.ID, holder, "order", 11, 20); err != nil || !done {
			t.Fatalf("give back the next range [11, 20] = %v, %v", done, err)
		}
		if done, err := s.GiveBackRange(t.Context(), cur.ID, holder, "order", 5, 10); err != nil || !done {
			t.Fatalf("give back the current range's tail [5, 10] after the next range = %v, %v; want given back", done, err)
		}
		if got := maxID(t, s, "order"); got != 4 {
			t.Fatalf("max_id %d, want 4", got)
		}
	})

	t.Run("concurrent allocations never overlap", func(t *testing.T) {
		const goroutines, each = 16, 40
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 3, MaxStep: 20})
		got := make([][]allocator.Segment, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					seg, err := s.Allocate(t.Context(), NewRequest("order", int64(i%25)))
					if err != nil {
						t.Error(err)
						return
					}
					got[g] = append(got[g], seg)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		var all []allocator.Segment
		for g, segs := range got {
			for i, seg := range segs {
				if i > 0 && seg.First <= segs[i-1].Last {
					t.Fatalf("goroutine %d: %+v after %+v", g, seg, segs[i-1])
				}
			}
			all = append(all, segs...)
		}
		slices.SortFunc(all, func(a, b allocator.Segment) int { return cmp.Compare(a.First, b.First) })
		next := int64(1)
		for _, seg := range all {
			if seg.First != next {
				t.Fatalf("segment %+v: want it to start at %d (overlap or hole)", seg, next)
			}
			next = seg.Last + 1
		}
		if got := maxID(t, s, "order"); got != next-1 {
			t.Fatalf("max_id = %d, granted up to %d", got, next-1)
		}
	})

	t.Run("an allocator recovers a lost reply by request ID", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10})
		lossy := &losingStore{Store: s, lose: 3}
		a := allocator.New(allocator.Config{
			Store:    lossy,
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			RetryMin: time.Millisecond,
			RetryMax: 5 * time.Millisecond,
			Segment:  segment.Config{Period: time.Nanosecond, WaitTimeout: 5 * time.Second, LoadTimeout: 5 * time.Second},
		})
		defer a.Close(context.Background())
		ids, err := a.NextN(t.Context(), "order", 25)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			if id != int64(i+1) {
				t.Fatalf("ids[%d] = %d, want %d: a lost reply cost a range", i, id, i+1)
			}
		}
		if lossy.lost() != 3 {
			t.Fatalf("lost %d replies, want 3", lossy.lost())
		}
	})

	t.Run("an unsettled request resumes on the next load", func(t *testing.T) {
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10})
		flaky := &unreachableStore{Store: s}
		a := allocator.New(allocator.Config{
			Store:    flaky,
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			RetryMin: time.Millisecond,
			RetryMax: 5 * time.Millisecond,
			Segment: segment.Config{
				Period: time.Nanosecond, WaitTimeout: 5 * time.Second, LoadTimeout: 2 * time.Second,
				MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
			},
		})
		defer a.Close(context.Background())
		// The tag serves: [1, 10], and [11, 20] fetched ahead.
		if _, err := a.NextN(t.Context(), "order", 5); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "the next range", func() bool {
			for _, st := range a.Stats() {
				if st.Tag == "order" {
					return st.NextRange != nil && !st.Loading
				}
			}
			return false
		})
		// The next allocation ([21, 30]) commits, its reply is lost, and
		// the store stays unreachable past the load's deadline.
		flaky.armed.Store(true)
		if _, err := a.NextN(t.Context(), "order", 15); err != nil { // 6..20
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "the buffers to run dry", func() bool {
			_, err := a.Next(t.Context(), "order")
			if err != nil && !errors.Is(err, allocator.ErrUnavailable) {
				t.Fatalf("Next while unreachable: %v, want ErrUnavailable", err)
			}
			return err != nil
		})
		lost, ok := flaky.committed()
		if !ok || lost.First != 21 {
			t.Fatalf("lost allocation %+v (%v), want [21, 30]", lost, ok)
		}
		if got := maxID(t, s, "order"); got != lost.Last {
			t.Fatalf("max_id %d, want %d: only the lost allocation committed", got, lost.Last)
		}
		flaky.down.Store(false)
		// The next load, once the failed one's backoff is over, resumes
		// the same request ID and serves its range; a new request would
		// have been granted [31, 40].
		var ids []int64
		testutil.Eventually(t, 30*time.Second, "service after the store came back", func() bool {
			var err error
			ids, err = a.NextN(t.Context(), "order", 15)
			if err != nil && !errors.Is(err, allocator.ErrUnavailable) {
				t.Fatalf("Next after the store came back: %v", err)
			}
			return err == nil
		})
		for i, id := range ids {
			if id != int64(21+i) {
				t.Fatalf("ids[%d] = %d, want %d: the unsettled request's range was not resumed", i, id, 21+i)
			}
		}
		if seg, err := s.Lookup(t.Context(), lost.RequestID); err != nil || seg.First != 21 || seg.Last != 30 {
			t.Fatalf("Lookup(%s) = %+v, %v; want [21, 30]", lost.RequestID, seg, err)
		}
	})

	t.Run("tag administration", func(t *testing.T) {
		s := open(t)
		created, err := s.CreateTag(t.Context(), allocator.TagSpec{Name: "user", Description: "users"})
		want := allocator.Tag{Name: "user", MaxID: 0, Step: allocator.DefaultStep, Description: "users"}
		if err != nil || created != want {
			t.Fatalf("CreateTag = %+v, %v; want %+v", created, err, want)
		}
		createTag(t, s, allocator.TagSpec{Name: "order", Step: 10, Start: 100})
		if _, err := s.CreateTag(t.Context(), allocator.TagSpec{Name: "order"}); !errors.Is(err, allocator.ErrExists) {
			t.Errorf("create twice: %v, want ErrExists", err)
		}
		for _, spec := range []allocator.TagSpec{
			{Name: "bad tag"}, {Name: "-x"}, {Name: ""}, {Name: string(make([]byte, 65))},
		} {
			if _, err := s.CreateTag(t.Context(), spec); !errors.Is(err, allocator.ErrInvalidTag) {
				t.Errorf("CreateTag(%q): %v, want ErrInvalidTag", spec.Name, err)
			}
		}
		for _, spec := range []allocator.TagSpec{
			{Name: "a", Step: -1}, {Name: "a", Step: 100, MaxStep: 10}, {Name: "a", Step: 100_000_001}, {Name: "a", Start: -5},
		} {
			if _, err := s.CreateTag(t.Context(), spec); err == nil {
				t.Errorf("CreateTag(%+v) accepted", spec)
			}
		}

		if tag, err := s.SetStep(t.Context(), "order", 20, 40); err != nil || tag.Step != 20 || tag.MaxStep != 40 || tag.MaxID != 99 {
			t.Fatalf("SetStep = %+v, %v", tag, err)
		}
		if seg, err := s.Allocate(t.Context(), NewRequest("order", 1000)); err != nil || seg.First != 100 || seg.Last != 139 {
			t.Fatalf("after SetStep: %+v, %v; want [100, 139]", seg, err)
		}
		if _, err := s.SetStep(t.Context(), "nope", 10, 0); !errors.Is(err, allocator.ErrUnknownTag) {
			t.Errorf("SetStep unknown: %v, want ErrUnknownTag", err)
		}
		if _, err := s.SetStep(t.Context(), "order", 50, 10); err == nil {
			t.Error("SetStep accepted max_step below step")
		}

		for _, b := range []struct {
			to, by, want int64
		}{
			{to: 1000, want: 1000},
			{by: 5, want: 1005},
		} {
			if tag, err := s.Bump(t.Context(), "order", b.to, b.by); err != nil || tag.MaxID != b.want {
				t.Fatalf("Bump(to %d, by %d) = %+v, %v; want max_id %d", b.to, b.by, tag, err, b.want)
			}
		}
		// Never lowers, and says so: nothing changed.
		for _, to := range []int64{10, 1005} {
			if tag, err := s.Bump(t.Context(), "order", to, 0); !errors.Is(err, allocator.ErrNotRaised) || tag.MaxID != 1005 {
				t.Fatalf("Bump(to %d) = %+v, %v; want max_id 1005 and ErrNotRaised", to, tag, err)
			}
		}
		if tag, err := s.Bump(t.Context(), "order", 0, math.MaxInt64); !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("Bump(by max) = %+v, %v; want ErrExhausted", tag, err)
		}
		if tag, err := s.Describe(t.Context(), "order", "orders of the shop"); err != nil || tag.Description != "orders of the shop" || tag.MaxID != 1005 {
			t.Fatalf("Describe = %+v, %v", tag, err)
		}
		if _, err := s.Describe(t.Context(), "nope", "x"); !errors.Is(err, allocator.ErrUnknownTag) {
			t.Errorf("Describe unknown: %v, want ErrUnknownTag", err)
		}
		if _, err := s.Describe(t.Context(), "order", strings.Repeat("x", 1001)); err == nil {
			t.Error("Describe accepted 1001 characters")
		}
		if _, err := s.Bump(t.Context(), "order", 10, 10); err == nil {
			t.Error("Bump accepted both --to and --by")
		}
		if _, err := s.Bump(t.Context(), "nope", 10, 0); !errors.Is(err, allocator.ErrUnknownTag) {
			t.Errorf("Bump unknown: %v, want ErrUnknownTag", err)
		}

		tags, err := s.Tags(t.Context())
		if err != nil || len(tags) != 2 || tags[0].Name != "order" || tags[1] != want {
			t.Fatalf("Tags = %+v, %v", tags, err)
		}
	})

	t.Run("a tag's runway is stored, changed, bounded and carried by its segments", func(t *testing.T) {
		s := open(t)
		created, err := s.CreateTag(t.Context(), allocator.TagSpec{Name: "slow", Step: 10, Runway: 8 * time.Second})
		if err != nil || created.Runway != 8*time.Second {
			t.Fatalf("CreateTag with a runway = %+v, %v", created, err)
		}
		if seg := mustAllocate(t, s, NewRequest("slow", 10)); seg.Runway != 8*time.Second {
			t.Fatalf("segment runway %v, want the tag's 8s", seg.Runway)
		}
		if tag, err := s.SetRunway(t.Context(), "slow", 90*time.Second); err != nil || tag.Runway != 90*time.Second || tag.Step != 10 {
			t.Fatalf("SetRunway = %+v, %v", tag, err)
		}
		req := NewRequest("slow", 10)
		if seg := mustAllocate(t, s, req); seg.Runway != 90*time.Second {
			t.Fatalf("segment runway after SetRunway %v, want 1m30s", seg.Runway)
		}
		if seg, err := s.Lookup(t.Context(), req.ID); err != nil || seg.Runway != 90*time.Second {
			t.Fatalf("Lookup = %+v, %v; want the tag's runway", seg, err)
		}
		for _, bad := range []time.Duration{-time.Second, allocator.MaxRunway + time.Millisecond, time.Microsecond} {
			if _, err := s.SetRunway(t.Context(), "slow", bad); !errors.Is(err, allocator.ErrInvalidSpec) {
				t.Errorf("SetRunway(%v) = %v, want ErrInvalidSpec", bad, err)
			}
			if _, err := s.CreateTag(t.Context(), allocator.TagSpec{Name: "bad", Runway: bad}); !errors.Is(err, allocator.ErrInvalidSpec) {
				t.Errorf("CreateTag with runway %v = %v, want ErrInvalidSpec", bad, err)
			}
		}
		if _, err := s.SetRunway(t.Context(), "nope", time.Second); !errors.Is(err, allocator.ErrUnknownTag) {
			t.Errorf("SetRunway unknown: %v, want ErrUnknownTag", err)
		}
		if tag, err := s.SetRunway(t.Context(), "slow", 0); err != nil || tag.Runway != 0 {
			t.Fatalf("SetRunway(0) = %+v, %v", tag, err)
		}
	})

	t.Run("a lookup carries the tag's settings as they are now", func(t *testing.T) {
		// A recovered segment is served under the tag's settings of the
		// moment, as a new one is: the SQL stores read them from the tag's
		// row, so every store must.
		s := open(t)
		createTag(t, s, allocator.TagSpec{Name: "slow", Step: 10, Runway: 8 * time.Second})
		req := NewRequest("slow", 10)
		mustAllocate(t, s, req)
		if _, err := s.SetRunway(t.Context(), "slow", 90*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetStep(t.Context(), "slow", 20, 400); err != nil {
			t.Fatal(err)
		}
		seg, err := s.Lookup(t.Context(), req.ID)
		if err != nil || seg.Runway != 90*time.Second || seg.Step != 20 || seg.MaxStep != 400 || seg.First != 1 || seg.Last != 10 {
			t.Fatalf("Lookup after SetRunway and SetStep = %+v, %v; want [1, 10], step 20, max_step 400, runway 1m30s", seg, err)
		}
	})

	t.Run("start and bump leave room for one segment below 2^63-1", func(t *testing.T) {
		s := open(t)
		const step = 100
		top := int64(math.MaxInt64 - step + 1) // the last start with room for one segment
		for _, start := range []int64{top + 1, math.MaxInt64} {
			_, err := s.CreateTag(t.Context(), allocator.TagSpec{Name: "top", Step: step, Start: start})
			if !errors.Is(err, allocator.ErrInvalidSpec) || !strings.Contains(err.Error(), "no room for one segment") {
				t.Fatalf("CreateTag(start %d, step %d) = %v, want ErrInvalidSpec saying why", start, step, err)
			}
		}
		if tags, err := s.Tags(t.Context()); err != nil || len(tags) != 0 {
			t.Fatalf("a refused spec created a tag: %+v, %v", tags, err)
		}
		createTag(t, s, allocator.TagSpec{Name: "top", Step: step, Start: top})
		if seg, err := s.Allocate(t.Context(), NewRequest("top", 0)); err != nil || seg.First != top || seg.Last != math.MaxInt64 {
			t.Fatalf("the one segment: %+v, %v; want [%d, 2^63-1]", seg, err, top)
		}
		if _, err := s.Allocate(t.Context(), NewRequest("top", 0)); !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("past 2^63-1: %v, want ErrExhausted", err)
		}

		createTag(t, s, allocator.TagSpec{Name: "order", Step: step})
		for _, b := range []struct{ to, by int64 }{
			{to: top}, {to: math.MaxInt64}, {by: top}, {by: math.MaxInt64},
		} {
			_, err := s.Bump(t.Context(), "order", b.to, b.by)
			if !errors.Is(err, allocator.ErrInvalidSpec) || !errors.Is(err, allocator.ErrExhausted) || !strings.Contains(err.Error(), "no room for one segment") {
				t.Fatalf("Bump(to %d, by %d) = %v, want ErrInvalidSpec and ErrExhausted saying why", b.to, b.by, err)
			}
			if got := maxID(t, s, "order"); got != 0 {
				t.Fatalf("a refused bump moved max_id to %d", got)
			}
		}
		// Exactly one segment of room is a valid bump.
		if tag, err := s.Bump(t.Context(), "order", top-1, 0); err != nil || tag.MaxID != top-1 {
			t.Fatalf("Bump(to %d) = %+v, %v", top-1, tag, err)
		}
		if seg, err := s.Allocate(t.Context(), NewRequest("order", 0)); err != nil || seg.Last != math.MaxInt64 {
			t.Fatalf("after the bump: %+v, %v; want the segment ending at 2^63-1", seg, err)
		}
		if _, err := s.Bump(t.Context(), "order", 0, 1); !errors.Is(err, allocator.ErrInvalidSpec) {
			t.Fatalf("Bump(by 1) at 2^63-1: %v, want ErrInvalidSpec", err)
		}
	})
}

// losingStore commits allocations but loses the first n replies, as a
// connection that drops after COMMIT would.
type losingStore struct {
	allocator.Store
	mu      sync.Mutex // protects lose and dropped
	lose    int
	dropped int
}

func (s *losingStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	seg, err := s.Store.Allocate(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.dropped < s.lose {
		s.dropped++
		return allocator.Segment{}, fmt.Errorf("%w: reply dropped by the test", allocator.ErrAmbiguous)
	}
	return seg, err
}

func (s *losingStore) lost() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// unreachableStore, once armed, commits the next allocation but loses its
// reply, and from then on, while down, fails every call as an unreachable
// database would.
type unreachableStore struct {
	allocator.Store
	armed, down atomic.Bool
	mu          sync.Mutex // protects first
	// first is the allocation that committed with its reply lost.
	first *allocator.Segment
}

var errUnreachable = errors.New("connect: connection refused (the test's store is down)")

func (s *unreachableStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed.Load() && s.first == nil {
		seg, err := s.Store.Allocate(ctx, req)
		if err != nil {
			return seg, err
		}
		s.first = &seg
		s.down.Store(true)
		return allocator.Segment{}, fmt.Errorf("%w: reply dropped by the test", allocator.ErrAmbiguous)
	}
	if s.down.Load() {
		return allocator.Segment{}, errUnreachable
	}
	return s.Store.Allocate(ctx, req)
}

func (s *unreachableStore) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	if s.down.Load() {
		return allocator.Segment{}, errUnreachable
	}
	return s.Store.Lookup(ctx, id)
}

func (s *unreachableStore) Ping(ctx context.Context) error {
	if s.down.Load() {
		return errUnreachable
	}
	return s.Store.Ping(ctx)
}

// committed returns the allocation whose reply was lost.
func (s *unreachableStore) committed() (allocator.Segment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		return allocator.Segment{}, false
	}
	return *s.first, true
}

// MaxIDSetter sets a tag's max_id behind the store's back, as an operator
// restoring the tags table from a backup would. The clauses that need it
// skip stores without it.
type MaxIDSetter interface {
	SetMaxID(name string, maxID int64)
}

func mustAllocate(tb testing.TB, s allocator.Store, req allocator.Request) allocator.Segment {
	tb.Helper()
	seg, err := s.Allocate(context.Background(), req)
	if err != nil {
		tb.Fatal(err)
	}
	return seg
}

// NewRequest returns a request for a segment of tag, of size (0: the tag's
// step), under a new request ID.
func NewRequest(tag string, size int64) allocator.Request {
	return allocator.Request{ID: uuid.Must(uuid.NewV7()), Tag: tag, Size: size, Instance: "storetest"}
}

func createTag(tb testing.TB, s allocator.Store, spec allocator.TagSpec) {
	tb.Helper()
	if _, err := s.CreateTag(context.Background(), spec); err != nil {
		tb.Fatal(err)
	}
}

func maxID(tb testing.TB, s allocator.Store, name string) int64 {
	tb.Helper()
	tags, err := s.Tags(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	for _, t := range tags {
		if t.Name == name {
			return t.MaxID
		}
	}
	tb.Fatalf("no tag %q", name)
	return 0
}

// AuditSQL finds, from the segment log alone, the log rows whose kept IDs
// overlap an earlier row's of the same tag: a row keeps [first_id,
// returned_from - 1] when part of it was given back, all of it otherwise.
// It returns one row per overlap; none means no ID was granted twice. It
// runs on PostgreSQL and SQLite.
const AuditSQL = `
SELECT biz_tag, first_id, kept_last, prev_last FROM (
    SELECT biz_tag, first_id, COALESCE(returned_from - 1, last_id) AS kept_last,
           max(COALESCE(returned_from - 1, last_id)) OVER (
               PARTITION BY biz_tag ORDER BY first_id, COALESCE(returned_from - 1, last_id)
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_last
    FROM idmint_segments
    WHERE returned_from IS NULL OR returned_from > first_id
) kept
WHERE first_id <= prev_last`

// naiveAuditSQL is AuditSQL blind to give-backs.
const naiveAuditSQL = `
SELECT biz_tag, first_id, last_id, prev_last FROM (
    SELECT biz_tag, first_id, last_id,
           max(last_id) OVER (PARTITION BY biz_tag ORDER BY first_id, last_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_last
    FROM idmint_segments
) granted
WHERE first_id <= prev_last`

// keptSQL counts the IDs the log says a tag kept.
const keptSQL = `
SELECT COALESCE(sum(COALESCE(returned_from - 1, last_id) - first_id + 1), 0)
FROM idmint_segments WHERE biz_tag = 'order'`

// Audit checks that the segment log explains every ID after give-backs:
// allocations and give-backs (a tail, a whole range, two touching ranges)
// leave ranges in the log that overlap later grants, yet AuditSQL finds no
// overlap, and the IDs the log keeps add up to max_id.
// query runs sql on the store's database and returns its number of rows, or its single
// integer when one is true.
func Audit(t *testing.T, s allocator.Store, query func(sql string, one bool) int64) {
	t.Helper()
	createTag(t, s, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10})
	alloc := func(first int64) {
		t.Helper()
		seg, err := s.Allocate(t.Context(), NewRequest("order", 0))
		if err != nil || seg.First != first {
			t.Fatalf("Allocate = %+v, %v; want it to start at %d", seg, err, first)
		}
	}
	back := func(first, last int64) {
		t.Helper()
		if done, err := s.GiveBack(t.Context(), "order", first, last); err != nil || !done {
			t.Fatalf("GiveBack(%d, %d) = %v, %v", first, last, done, err)
		}
	}
	alloc(1)
	alloc(11)
	back(15, 20) // a tail
	alloc(15)
	alloc(25)
	back(25, 34) // a whole range
	alloc(25)
	alloc(35)
	alloc(45)
	back(40, 54) // a tail and the touching range after it
	alloc(40)
	alloc(50)
	if n := query(naiveAuditSQL, false); n == 0 {
		t.Fatal("the log blind to give-backs shows no overlap: the scenario proves nothing")
	}
	if n := query(AuditSQL, false); n != 0 {
		t.Fatalf("the audit finds %d overlapping rows once give-backs are accounted", n)
	}
	if kept, m := query(keptSQL, true), maxID(t, s, "order"); kept != m {
		t.Fatalf("the log keeps %d ids, max_id is %d", kept, m)
	}
}
