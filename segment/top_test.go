package segment_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

// errTopExhausted is what topLoader returns past 2^63-1, as a store does.
var errTopExhausted = errors.New("biz_tag exhausted: no ids left below 2^63-1")

// topLoader grants consecutive ranges from first up to 2^63-1, then fails:
// the store side of a tag started near the top of int64. It grants what is
// asked (the tag's step for size 0), cut at 2^63-1.
type topLoader struct {
	mu   sync.Mutex // protects next and done
	next int64      // the first ID of the next grant
	done bool       // 2^63-1 was granted
	step int64
}

func (l *topLoader) Load(ctx context.Context, size int64) (segment.Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return segment.Grant{}, errTopExhausted
	}
	if size < l.step {
		size = l.step
	}
	r := segment.Range{First: l.next, Last: math.MaxInt64}
	if size-1 < math.MaxInt64-l.next {
		r.Last = l.next + size - 1
	}
	if r.Last == math.MaxInt64 {
		l.done = true
	} else {
		l.next = r.Last + 1
	}
	return segment.Grant{Range: r, MinStep: l.step, MaxStep: 1 << 40}, nil
}

// FuzzBuffer_TopOfInt64 takes every ID of a tag that ends at 2^63-1 with
// random mixes of Take, TryTake, TakeN and TakeRanges of random sizes. Every
// ID handed out must lie in the tag's range, be unique and increasing; the
// buffer must hand out all of them up to 2^63-1 and then refuse, in a
// bounded number of calls, each returning at most what was asked; Stats
// must never show a negative next ID or a wrong count.
func FuzzBuffer_TopOfInt64(f *testing.F) {
	for _, seed := range []struct {
		dist uint32 // IDs below 2^63-1 where the tag starts
		step uint16
		seed uint64
	}{
		{0, 1, 1}, {9, 10, 2}, {10, 10, 3}, {99, 7, 4}, {999, 1000, 5},
		{1000, 3, 6}, {5000, 64, 7}, {65535, 1, 8}, {3, 65535, 9},
	} {
		f.Add(seed.dist, seed.step, seed.seed)
	}
	f.Fuzz(func(t *testing.T, dist uint32, step uint16, seed uint64) {
		dist %= 20_000 // bounds the IDs a run takes
		first := math.MaxInt64 - int64(dist)
		// At most about 200 loads a run: a run that outlasts -fuzztime
		// is reported by the fuzzing engine as "context deadline exceeded".
		l := &topLoader{next: first, step: max(int64(step), int64(dist)/200, 1)}
		b := segment.New(segment.Config{Tag: "top", Loader: l, Logger: quiet(),
			WaitTimeout: 5 * time.Second, MinBackoff: time.Hour, MaxBackoff: time.Hour})
		defer b.Close()
		rng := rand.New(rand.NewPCG(seed, uint64(dist)))
		ctx := context.Background()
		var (
			last   = first - 1 // the last ID handed out
			issued int64
			ids    []int64
			ranges []segment.Range
		)
		// accept checks one ID handed out.
		accept := func(id int64) {
			t.Helper()
			if id < first || id <= last {
				t.Fatalf("handed out %d after %d (tag starts at %d): out of range, repeated or decreasing", id, last, first)
			}
			last = id
			issued++
		}
		// Each call hands out at least one ID until the top is reached:
		// more calls than IDs mean taking loops without progress.
		calls := int64(dist) + 2
		for call := int64(0); ; call++ {
			if call > calls {
				t.Fatalf("%d calls for %d ids: taking makes no progress (last %d)", call, dist+1, last)
			}
			k := 1 + rng.IntN(300)
			var err error
			switch op := rng.IntN(4); op {
			case 0:
				var id int64
				if id, err = b.Take(ctx); err == nil {
					accept(id)
				}
			case 1:
				id, ok := b.TryTake()
				if ok {
					accept(id)
					continue
				}
				var id2 int64
				if id2, err = b.Take(ctx); err == nil {
					accept(id2)
				}
			case 2:
				ids, err = b.TakeN(ctx, k, ids[:0])
				if len(ids) > k {
					t.Fatalf("TakeN(%d) returned %d ids", k, len(ids))
				}
				for _, id := range ids {
					accept(id)
				}
			case 3:
				ranges, err = b.TakeRanges(ctx, k, ranges[:0])
				n := int64(0)
				for _, r := range ranges {
					if r.First > r.Last || r.First <= last {
						t.Fatalf("TakeRanges(%d): range [%d, %d] after %d", k, r.First, r.Last, last)
					}
					n += r.Len()
					last, issued = r.Last, issued+r.Len()
				}
				if n > int64(k) {
					t.Fatalf("TakeRanges(%d) returned %d ids", k, n)
				}
			}
			st := b.Stats()
			if st.Next < 0 || st.Remaining < 0 || st.Issued != issued {
				t.Fatalf("stats after %d ids up to %d: next %d, remaining %d, issued %d", issued, last, st.Next, st.Remaining, st.Issued)
			}
			if err != nil {
				if last != math.MaxInt64 {
					t.Fatalf("failed at %d, before 2^63-1: %v", last, err)
				}
				if !errors.Is(err, errTopExhausted) {
					t.Fatalf("after 2^63-1: %v, want the loader's exhausted error", err)
				}
				break
			}
		}
		if want := int64(dist) + 1; issued != want {
			t.Fatalf("handed out %d ids of the %d from %d to 2^63-1", issued, want, first)
		}
		// Taking again fails at once and hands out nothing.
		if id, ok := b.TryTake(); ok {
			t.Fatalf("TryTake past 2^63-1 = %d", id)
		}
		if got, err := b.TakeN(ctx, 5, nil); err == nil || len(got) != 0 {
			t.Fatalf("TakeN past 2^63-1 = %v, %v", got, err)
		}
	})
}

// TestBuffer_TopOfInt64Concurrent: goroutines taking at once from a tag
// whose last range ends at 2^63-1 get every ID of it exactly once.
func TestBuffer_TopOfInt64Concurrent(t *testing.T) {
	const dist = 5000
	first := int64(math.MaxInt64 - dist)
	b := newBuffer(t, &topLoader{next: first, step: 100}, func(c *segment.Config) { c.MinBackoff, c.MaxBackoff = time.Hour, time.Hour })
	got := make(chan []int64, 8)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			var mine []int64
			for range dist + 2 { // bounded: at most one call per ID and one to fail
				var err error
				if w%2 == 0 {
					mine, err = b.TakeN(context.Background(), 1+w, mine)
				} else {
					var id int64
					if id, err = b.Take(context.Background()); err == nil {
						mine = append(mine, id)
					}
				}
				if err != nil {
					break
				}
			}
			got <- mine
		})
	}
	wg.Wait()
	close(got)
	seen := make(map[int64]bool, dist+1)
	for mine := range got {
		for i, id := range mine {
			if id < first || seen[id] || (i > 0 && id <= mine[i-1]) {
				t.Fatalf("id %d: out of range, repeated, or not increasing within its goroutine", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != dist+1 || !seen[math.MaxInt64] {
		t.Fatalf("%d ids handed out, want %d up to 2^63-1 (top handed out: %v)", len(seen), dist+1, seen[math.MaxInt64])
	}
}
