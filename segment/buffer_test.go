package segment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

// counterLoader grants consecutive ranges like the database would.
type counterLoader struct {
	mu      sync.Mutex
	maxID   int64
	minStep int64
	maxStep int64   // 0: no bound beyond the default
	sizes   []int64 // sizes asked for
	fail    error   // when set, Load fails with it
	block   chan struct{}
	loads   atomic.Int64
}

func (l *counterLoader) Load(ctx context.Context, size int64) (segment.Grant, error) {
	if l.block != nil {
		select {
		case <-l.block:
		case <-ctx.Done():
			return segment.Grant{}, ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loads.Add(1)
	l.sizes = append(l.sizes, size)
	if l.fail != nil {
		return segment.Grant{}, l.fail
	}
	if size < l.minStep {
		size = l.minStep
	}
	if l.maxStep > 0 && size > l.maxStep {
		size = l.maxStep
	}
	first := l.maxID + 1
	l.maxID += size
	return segment.Grant{Range: segment.Range{First: first, Last: l.maxID}, MinStep: l.minStep, MaxStep: l.maxStep}, nil
}

func (l *counterLoader) setFail(err error) {
	l.mu.Lock()
	l.fail = err
	l.mu.Unlock()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newBuffer(tb testing.TB, l segment.Loader, mod func(*segment.Config)) *segment.Buffer {
	tb.Helper()
	cfg := segment.Config{Tag: "t", Loader: l, Logger: quiet(), WaitTimeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	b := segment.New(cfg)
	tb.Cleanup(func() { b.Close() })
	return b
}

func TestBuffer_Take(t *testing.T) {
	t.Run("sequential across many ranges", func(t *testing.T) {
		l := &counterLoader{minStep: 10}
		b := newBuffer(t, l, nil)
		for want := int64(1); want <= 1000; want++ {
			got, err := b.Take(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("Take = %d, want %d", got, want)
			}
		}
		if st := b.Stats(); st.Issued != 1000 {
			t.Fatalf("Issued = %d, want 1000", st.Issued)
		}
	})

	t.Run("prefetches the next range after the threshold", func(t *testing.T) {
		l := &counterLoader{minStep: 100}
		b := newBuffer(t, l, nil)
		for range 9 {
			if _, err := b.Take(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if st := b.Stats(); st.NextRange != nil || st.Loads != 1 {
			t.Fatalf("before the threshold: next=%v loads=%d, want none and 1", st.NextRange, st.Loads)
		}
		if _, err := b.Take(context.Background()); err != nil { // the 10th ID: 10% used
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "next range", func() bool { return b.Stats().NextRange != nil })
		st := b.Stats()
		if st.NextRange.First != 101 || st.Current.First != 1 || st.Remaining != 90 {
			t.Fatalf("after prefetch: current=%v next=%v remaining=%d", st.Current, st.NextRange, st.Remaining)
		}
	})

	t.Run("switches without waiting when the next range is ready", func(t *testing.T) {
		l := &counterLoader{minStep: 10}
		b := newBuffer(t, l, nil)
		for range 2 {
			b.Take(context.Background())
		}
		eventually(t, 5*time.Second, "next range", func() bool { return b.Stats().NextRange != nil })
		l.setFail(errors.New("database down")) // the switch must not need the loader
		for want := int64(3); want <= 20; want++ {
			got, err := b.Take(context.Background())
			if err != nil || got != want {
				t.Fatalf("Take = %d, %v; want %d", got, err, want)
			}
		}
	})
}

func TestBuffer_TakeN(t *testing.T) {
	l := &counterLoader{minStep: 7}
	b := newBuffer(t, l, nil)
	ids, err := b.TakeN(context.Background(), 50, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("ids[%d] = %d, want %d", i, id, i+1)
		}
	}
	if len(ids) != 50 {
		t.Fatalf("len = %d, want 50", len(ids))
	}
}

// TestBuffer_Concurrent takes from many goroutines with a tiny step so the
// ranges switch constantly: no ID twice, each goroutine's IDs increasing.
func TestBuffer_Concurrent(t *testing.T) {
	l := &counterLoader{minStep: 3}
	b := newBuffer(t, l, func(c *segment.Config) { c.Period = time.Nanosecond }) // keep the step small
	const workers, each = 32, 2000
	takeConcurrently(t, workers, each, func() (int64, error) { return b.Take(context.Background()) })
	if st := b.Stats(); st.Issued != workers*each || st.Loads < workers*each/1000 {
		t.Fatalf("Issued=%d Loads=%d", st.Issued, st.Loads)
	}
}

// TestBuffer_ConcurrentOneRange takes from many goroutines out of one
// large range, so that they all race on the same next ID, for two seconds
// (long enough for the scheduler to preempt takes midway many times): the
// take must be one atomic step, or two goroutines get the same ID. Every
// ID is marked in a bitmap as it is taken.
func TestBuffer_ConcurrentOneRange(t *testing.T) {
	const workers, most = 8, 1 << 23 // takes per worker at most
	l := &counterLoader{minStep: workers * most}
	b := newBuffer(t, l, nil)
	first, err := b.Take(context.Background()) // load the range first
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]atomic.Uint64, (workers*most)/64+1)
	var taken, dups atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := 0; i < most && (i%1024 != 0 || time.Now().Before(deadline)); i++ {
				id, err := b.Take(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				n := id - first - 1 // this range's IDs after first, from 0
				if n < 0 || n >= int64(len(seen))*64 {
					t.Errorf("id %d outside the range after %d", id, first)
					return
				}
				if bit := uint64(1) << (n % 64); seen[n/64].Or(bit)&bit != 0 {
					dups.Add(1)
				}
				taken.Add(1)
			}
		})
	}
	wg.Wait()
	if d := dups.Load(); d != 0 {
		t.Fatalf("%d duplicate ids among %d takes: two takes got the same id", d, taken.Load())
	}
	t.Logf("%d takes from %d goroutines, no duplicate", taken.Load(), workers)
}

func TestBuffer_Unavailable(t *testing.T) {
	t.Run("fails fast when the loader fails", func(t *testing.T) {
		l := &counterLoader{minStep: 10, fail: errors.New("connection refused")}
		b := newBuffer(t, l, func(c *segment.Config) { c.MinBackoff = time.Hour })
		_, err := b.Take(context.Background())
		if !errors.Is(err, segment.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		start := time.Now()
		_, err = b.Take(context.Background())
		var ue *segment.UnavailableError
		if !errors.As(err, &ue) || ue.RetryAfter <= 0 {
			t.Fatalf("second Take err = %v, want UnavailableError with RetryAfter", err)
		}
		if l.loads.Load() != 1 {
			t.Fatalf("loads = %d, want 1: callers must not hammer a failing loader", l.loads.Load())
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("fail-fast Take took %v", d)
		}
		if st := b.Stats(); st.LoadFailures != 1 || st.Serving || st.LastError == "" {
			t.Fatalf("stats = %+v", st)
		}
	})

	t.Run("recovers when the loader heals", func(t *testing.T) {
		l := &counterLoader{minStep: 10, fail: errors.New("down")}
		b := newBuffer(t, l, func(c *segment.Config) { c.MinBackoff = time.Millisecond; c.MaxBackoff = time.Millisecond })
		if _, err := b.Take(context.Background()); err == nil {
			t.Fatal("Take succeeded with a failing loader")
		}
		l.setFail(nil)
		time.Sleep(5 * time.Millisecond)
		if id, err := b.Take(context.Background()); err != nil || id != 1 {
			t.Fatalf("Take = %d, %v; want 1", id, err)
		}
	})

	t.Run("waits at most WaitTimeout for a hung loader", func(t *testing.T) {
		l := &counterLoader{minStep: 10, block: make(chan struct{})}
		b := newBuffer(t, l, func(c *segment.Config) { c.WaitTimeout = 50 * time.Millisecond })
		_, err := b.Take(context.Background())
		if !errors.Is(err, segment.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		close(l.block)
	})

	t.Run("honours the caller's context", func(t *testing.T) {
		l := &counterLoader{minStep: 10, block: make(chan struct{})}
		b := newBuffer(t, l, func(c *segment.Config) { c.WaitTimeout = time.Hour })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := b.Take(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		close(l.block)
	})
}

func TestBuffer_AntiRollback(t *testing.T) {
	l := &counterLoader{minStep: 10, maxStep: 10} // a switch every 10 IDs
	b := newBuffer(t, l, func(c *segment.Config) { c.MinBackoff = time.Hour })
	ids, err := b.TakeN(context.Background(), 15, nil) // from ranges [1,10] and [11,20]
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "prefetch", func() bool { st := b.Stats(); return st.NextRange != nil }) // [21,30]
	ids, err = b.TakeN(context.Background(), 10, ids)                                                     // up to 25; [31,40] granted
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "prefetch", func() bool { st := b.Stats(); return !st.Loading })
	highest := b.Stats().Highest

	// The database goes back in time: max_id restored to 5.
	l.mu.Lock()
	l.maxID = 5
	l.mu.Unlock()

	// At most what was granted before the rollback can still be served;
	// the bound makes a buffer that serves refused ranges fail, not spin.
	for i := 0; ; i++ {
		if i > int(highest) {
			t.Fatalf("%d ids served after the rollback, more than the %d granted before it: a refused range is being served", i, highest)
		}
		id, err := b.Take(context.Background())
		if err != nil {
			if !errors.Is(err, segment.ErrRolledBack) {
				t.Fatalf("err = %v, want ErrRolledBack", err)
			}
			break
		}
		ids = append(ids, id)
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("duplicate %d served after rollback", id)
		}
		seen[id] = true
		if id > highest {
			t.Fatalf("served %d from a refused range (highest granted before rollback %d)", id, highest)
		}
	}
	if st := b.Stats(); st.Refused != 1 || st.Serving {
		t.Fatalf("Refused=%d Serving=%v, want 1 and false", st.Refused, st.Serving)
	}
}

func TestBuffer_Close(t *testing.T) {
	l := &counterLoader{minStep: 10}
	b := segment.New(segment.Config{Tag: "t", Loader: l, Logger: quiet(), Period: time.Nanosecond})
	for range 3 {
		b.Take(context.Background())
	}
	eventually(t, 5*time.Second, "next range", func() bool { return b.Stats().NextRange != nil })
	unused := b.Close()
	want := []segment.Range{{First: 4, Last: 10}, {First: 11, Last: 20}}
	if len(unused) != 2 || unused[0] != want[0] || unused[1] != want[1] {
		t.Fatalf("unused = %v, want %v", unused, want)
	}
	if _, err := b.Take(context.Background()); !errors.Is(err, segment.ErrClosed) {
		t.Fatalf("Take after Close: %v, want ErrClosed", err)
	}
	if st := b.Stats(); st.Abandoned != 17 || st.Issued != 3 {
		t.Fatalf("Abandoned=%d Issued=%d, want 17 and 3", st.Abandoned, st.Issued)
	}
}

func TestBuffer_DynamicStep(t *testing.T) {
	var now atomic.Int64
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	l := &counterLoader{minStep: 100}
	b := newBuffer(t, l, func(c *segment.Config) { c.Now = clock; c.Period = time.Minute })

	take := func(n int, every time.Duration) {
		t.Helper()
		for range n {
			now.Add(int64(every))
			if _, err := b.Take(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 5*time.Second, "loads to settle", func() bool { return !b.Stats().Loading })
	}
	// 1,000 IDs/s with a one-minute period wants ranges of ~60,000.
	take(5000, time.Millisecond)
	grown := b.Stats().Step
	if grown < 10_000 {
		t.Fatalf("step after a fast period = %d, want it grown far past 100", grown)
	}
	// Then traffic almost stops: each load halves the step, never below min.
	for range 20 {
		st := b.Stats()
		remaining := st.Remaining
		take(int(remaining)+1, time.Minute)
	}
	if st := b.Stats(); st.Step != 100 {
		t.Fatalf("step after a slow period = %d, want the minimum 100", st.Step)
	}
}

// TestBuffer_CloseWaitsForLoad: a load in flight when Close begins comes
// back with its range, and Close reports it as unused instead of losing it.
func TestBuffer_CloseWaitsForLoad(t *testing.T) {
	l := &counterLoader{minStep: 10}
	b := segment.New(segment.Config{Tag: "t", Loader: l, Logger: quiet(), Period: time.Nanosecond})
	for range 5 {
		if _, err := b.Take(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "next range", func() bool { return b.Stats().NextRange != nil })
	l.block = make(chan struct{})          // the next load hangs…
	b.TakeN(context.Background(), 10, nil) // …the one of [21,30], started by moving into [11,20]
	eventually(t, 5*time.Second, "load in flight", func() bool { return b.Stats().Loading })
	time.AfterFunc(50*time.Millisecond, func() { close(l.block) }) // …until Close waits on it
	unused := b.Close()
	want := []segment.Range{{First: 16, Last: 20}, {First: 21, Last: 30}}
	if len(unused) != 2 || unused[0] != want[0] || unused[1] != want[1] {
		t.Fatalf("unused = %v, want %v", unused, want)
	}
}

// TestBuffer_FailFastDuringRetry: while the retry of a failed load hangs,
// only the caller that started it waits; the others get ErrUnavailable at
// once.
func TestBuffer_FailFastDuringRetry(t *testing.T) {
	l := &counterLoader{minStep: 10, fail: errors.New("connection refused")}
	b := newBuffer(t, l, func(c *segment.Config) {
		c.MinBackoff, c.MaxBackoff = time.Millisecond, time.Millisecond
		c.WaitTimeout = 5 * time.Second
	})
	if _, err := b.Take(context.Background()); err == nil {
		t.Fatal("Take succeeded with a failing loader")
	}
	time.Sleep(5 * time.Millisecond) // past the backoff
	l.block = make(chan struct{})    // the retry hangs
	defer close(l.block)
	go b.Take(context.Background()) // starts the retry and waits on it
	eventually(t, 5*time.Second, "retry in flight", func() bool { return b.Stats().Loading })
	start := time.Now()
	if _, err := b.Take(context.Background()); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Take waited %v on a hanging retry", d)
	}
}

// onceLoader grants one range, then fails every load.
type onceLoader struct {
	r    segment.Range
	done atomic.Bool
}

func (l *onceLoader) Load(ctx context.Context, size int64) (segment.Grant, error) {
	if l.done.Swap(true) {
		return segment.Grant{}, errors.New("database down")
	}
	return segment.Grant{Range: l.r, MinStep: l.r.Len()}, nil
}

// TestBuffer_TakeNHugeCount: a TakeN that fails must not move the range's
// counter. Counts near 2^63 would otherwise wrap it below the range's start
// (two failed adds of 2^63-1 move it back by two), and later takes would
// hand out IDs again.
func TestBuffer_TakeNHugeCount(t *testing.T) {
	for _, count := range []int{math.MaxInt, 1 << 62, 1<<62 + 3} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			b := newBuffer(t, &onceLoader{r: segment.Range{First: 1, Last: 10}}, func(c *segment.Config) { c.MinBackoff = time.Hour })
			ctx := context.Background()
			ids, err := b.TakeN(ctx, 10, nil)
			if err != nil || len(ids) != 10 {
				t.Fatalf("TakeN(10) = %v, %v", ids, err)
			}
			eventually(t, 5*time.Second, "the prefetch to fail", func() bool { return b.Stats().LoadFailures == 1 })
			for range 8 {
				if got, err := b.TakeN(ctx, count, nil); err == nil || len(got) != 0 {
					t.Fatalf("TakeN(%d) on an empty buffer = %d ids, %v", count, len(got), err)
				}
				if id, err := b.Take(ctx); err == nil {
					t.Fatalf("Take after a failed TakeN(%d) = %d: handed out again", count, id)
				}
			}
			if st := b.Stats(); st.Issued != 10 || st.Remaining != 0 {
				t.Fatalf("Issued %d, Remaining %d; want 10 and 0", st.Issued, st.Remaining)
			}
		})
	}
}

// TestBuffer_GaveBackBounds: GaveBack counts at most what Close left
// abandoned, and ignores ranges that are not ranges.
func TestBuffer_GaveBackBounds(t *testing.T) {
	for _, r := range []segment.Range{
		{First: 1, Last: math.MaxInt64},             // more than was abandoned; its length overflows
		{First: math.MinInt64, Last: math.MaxInt64}, // not a range of IDs
		{First: 20, Last: 10},                       // empty
	} {
		b := segment.New(segment.Config{Tag: "t", Loader: &counterLoader{minStep: 10}, Logger: quiet()})
		if _, err := b.Take(context.Background()); err != nil {
			t.Fatal(err)
		}
		unused := b.Close()
		var left int64
		for _, u := range unused {
			left += u.Len()
		}
		b.GaveBack(r)
		st := b.Stats()
		if st.Abandoned < 0 || st.GivenBack < 0 || st.Abandoned+st.GivenBack != left {
			t.Fatalf("GaveBack(%v): abandoned %d, given back %d; want them to add up to the %d unused", r, st.Abandoned, st.GivenBack, left)
		}
	}
}

// latencyLoader grants consecutive ranges and moves a fake clock by latency
// during each load, as a database round trip would.
type latencyLoader struct {
	counterLoader
	now     *atomic.Int64
	latency time.Duration
}

func (l *latencyLoader) Load(ctx context.Context, size int64) (segment.Grant, error) {
	l.now.Add(int64(l.latency))
	return l.counterLoader.Load(ctx, size)
}

func (l *latencyLoader) asked() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.sizes...)
}

// TestBuffer_StarvedGrowth: when callers waited on an empty buffer, the step
// grows 16× at the next load instead of 4×, so that a fresh tag under load
// reaches ranges that outlast a load in a few loads; without a wait it grows
// as usual.
func TestBuffer_StarvedGrowth(t *testing.T) {
	var now atomic.Int64
	l := &latencyLoader{counterLoader: counterLoader{minStep: 10}, now: &now, latency: 30 * time.Millisecond}
	b := newBuffer(t, l, func(c *segment.Config) { c.Now = func() time.Time { return time.Unix(0, now.Load()) } })
	take := func(n int) {
		t.Helper()
		for range n {
			now.Add(int64(20 * time.Microsecond)) // 50,000 IDs/s
			if _, err := b.Take(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The first Take waits for the first load, and its ID crosses the
	// threshold of [1,10]: the second load follows a wait.
	take(1)
	eventually(t, 5*time.Second, "the second range", func() bool { return b.Stats().NextRange != nil })
	if got := l.asked(); len(got) != 2 || got[0] != 0 || got[1] != 160 {
		t.Fatalf("sizes asked = %v, want [0 160]: 16× after callers waited", got)
	}
	// The rest of [1,10] and 10% of [11,170]: nobody waited since the
	// second load started, so the third load grows 4×.
	take(9 + 16)
	eventually(t, 5*time.Second, "the third range", func() bool { return b.Stats().NextRange != nil })
	if got := l.asked(); len(got) != 3 || got[2] != 640 {
		t.Fatalf("sizes asked = %v, want a third load of 640: 4× without a wait", got)
	}
}

// takeFast takes as allocator.Next does: TryTake, and Take when it
// declines.
func takeFast(ctx context.Context, b *segment.Buffer) (int64, error) {
	if id, ok := b.TryTake(); ok {
		return id, nil
	}
	return b.Take(ctx)
}

// TestBuffer_TryTake: callers on the fast path still start the prefetch
// once the threshold is crossed (TryTake only marks it due, the next
// caller's Take starts it), so the range switch never waits; and no ID is
// skipped or repeated by handing TryTake's decline to Take.
func TestBuffer_TryTake(t *testing.T) {
	l := &counterLoader{minStep: 100, maxStep: 100}
	b := newBuffer(t, l, nil) // threshold 0.1: the 10th ID of a range starts the next load
	ctx := context.Background()
	if _, ok := b.TryTake(); ok {
		t.Fatal("TryTake took from a buffer that loaded nothing")
	}
	if l.loads.Load() != 0 {
		t.Fatal("TryTake loaded")
	}
	var fast, prefetchedAt int64
	for want := int64(1); want <= 1000; want++ {
		id, ok := b.TryTake()
		if ok {
			fast++
		} else {
			var err error
			if id, err = b.Take(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if id != want {
			t.Fatalf("got id %d, want %d: the decline lost or repeated one", id, want)
		}
		if st := b.Stats(); prefetchedAt == 0 && (st.Loading || st.NextRange != nil) {
			prefetchedAt = id
		}
		if id%100 == 0 && id < 1000 {
			// A range used up: its successor must be loaded by now, or
			// loading, started from the fast path's mark.
			eventually(t, 5*time.Second, "the prefetch of the next range", func() bool { return l.loads.Load() >= id/100+1 })
		}
	}
	if prefetchedAt == 0 || prefetchedAt > 11 {
		t.Fatalf("second load started at id %d, want by the 11th (threshold 10, one decline)", prefetchedAt)
	}
	// One decline per range to start its prefetch, and the first take.
	if fast < 1000-2*10 {
		t.Fatalf("%d of 1000 takes on the fast path", fast)
	}

	// Many goroutines mixing the fast path and Take across range switches.
	const workers, each = 16, 5000
	for id := range takeConcurrently(t, workers, each, func() (int64, error) { return takeFast(ctx, b) }) {
		if id <= 1000 {
			t.Fatalf("id %d again", id)
		}
	}
}

// takeConcurrently calls take each times on each of workers goroutines,
// fails on a duplicate, an ID that does not increase within its goroutine
// or an error, and returns the IDs.
func takeConcurrently(t *testing.T, workers, each int, take func() (int64, error)) map[int64]bool {
	t.Helper()
	results := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				id, err := take()
				if err != nil {
					t.Error(err)
					return
				}
				results[w] = append(results[w], id)
			}
		}()
	}
	wg.Wait()
	seen := make(map[int64]bool, workers*each)
	for w, ids := range results {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate id %d", id)
			}
			seen[id] = true
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("worker %d: id %d after %d", w, id, ids[i-1])
			}
		}
	}
	if len(seen) != workers*each {
		t.Fatalf("got %d ids, want %d", len(seen), workers*each)
	}
	return seen
}

// TestUnavailableError_Refused: a refused load's error gives no retry hint
// (a 403 is not worth retrying), while a failed one still says when.
func TestUnavailableError_Refused(t *testing.T) {
	refused := &segment.UnavailableError{Tag: "user", RetryAfter: 100 * time.Millisecond,
		Err: segment.Classify(segment.ErrRefused, errors.New("403 forbidden"))}
	if got, want := refused.Error(), `tag "user": no ids available, the load was refused: 403 forbidden`; got != want {
		t.Errorf("refused: %q, want %q", got, want)
	}
	failed := &segment.UnavailableError{Tag: "user", RetryAfter: 100 * time.Millisecond, Err: errors.New("connection refused")}
	if got, want := failed.Error(), `tag "user": no ids available, retry in 100ms: connection refused`; got != want {
		t.Errorf("failed: %q, want %q", got, want)
	}
}
