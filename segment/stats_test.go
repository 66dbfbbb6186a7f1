package segment_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

// fakeClock is a clock the test moves by hand; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func take(tb testing.TB, b *segment.Buffer, n int) {
	tb.Helper()
	for range n {
		if _, err := b.Take(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
}

func TestBuffer_StatsRate(t *testing.T) {
	clock := newFakeClock()
	l := &counterLoader{minStep: 100}
	b := newBuffer(t, l, func(c *segment.Config) { c.Now = clock.Now })

	if st := b.Stats(); st.Rate != 0 {
		t.Fatalf("before any load: rate %v, want 0", st.Rate)
	}
	if _, ok := b.Stats().UntilDry(); ok {
		t.Fatal("UntilDry with no rate: want never")
	}
	take(t, b, 1) // the first load starts now
	clock.Advance(5 * time.Second)
	take(t, b, 8)
	if st := b.Stats(); st.Rate != 9.0/5 {
		t.Fatalf("9 ids in 5s since the first load: rate %v, want 1.8", st.Rate)
	}

	clock.Advance(5 * time.Second)
	take(t, b, 1) // the 10th ID crosses the threshold: a load starts
	eventually(t, 5*time.Second, "next range", func() bool { return b.Stats().NextRange != nil })
	// The new window is 0s old: the one before is added to it.
	if st := b.Stats(); st.Rate != 1 {
		t.Fatalf("10 ids in 10s: rate %v, want 1", st.Rate)
	}

	clock.Advance(20 * time.Second)
	take(t, b, 40)
	st := b.Stats()
	if st.Rate != 2 {
		t.Fatalf("40 ids in the 20s since the last load started: rate %v, want 2", st.Rate)
	}
	if st.Remaining != 50 || st.Available() != 50+st.NextRange.Len() {
		t.Fatalf("remaining %d, available %d, next %v", st.Remaining, st.Available(), st.NextRange)
	}
	d, ok := st.UntilDry()
	if want := time.Duration(float64(st.Available()) / 2 * float64(time.Second)); !ok || d != want {
		t.Fatalf("UntilDry = %v, %v; want %v", d, ok, want)
	}
}

func TestStats_UntilDry(t *testing.T) {
	tests := []struct {
		name string
		st   segment.Stats
		want time.Duration
		ok   bool
	}{
		{"no rate", segment.Stats{Remaining: 10}, 0, false},
		{"current only", segment.Stats{Remaining: 10, Rate: 5}, 2 * time.Second, true},
		{"current and next", segment.Stats{Remaining: 10, NextRange: &segment.Range{First: 1, Last: 20}, Rate: 10}, 3 * time.Second, true},
		{"dry", segment.Stats{Rate: 10}, 0, true},
		{"huge", segment.Stats{Remaining: math.MaxInt64, Rate: 1e-9}, time.Duration(math.MaxInt64), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.st.UntilDry()
			if got != tt.want || ok != tt.ok {
				t.Fatalf("UntilDry = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestBuffer_StatsNextLate(t *testing.T) {
	l := &counterLoader{minStep: 100}
	b := newBuffer(t, l, func(c *segment.Config) { c.MinBackoff = time.Hour })
	take(t, b, 1)
	l.setFail(errors.New("database down"))
	take(t, b, 8)
	if st := b.Stats(); st.NextLate {
		t.Fatalf("before the threshold: %+v", st)
	}
	take(t, b, 1) // the threshold: the prefetch fails
	eventually(t, 5*time.Second, "failed prefetch", func() bool { return b.Stats().LoadFailures == 1 })
	st := b.Stats()
	if !st.NextLate || st.NextRange != nil || !st.Serving || st.LastError == "" {
		t.Fatalf("after a failed prefetch: %+v", st)
	}
}

func TestBuffer_OnLoad(t *testing.T) {
	type call struct {
		tag     string
		latency time.Duration
		err     error
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	clock := newFakeClock()
	loader := segment.LoaderFunc(func(ctx context.Context, size int64) (segment.Grant, error) {
		clock.Advance(7 * time.Millisecond)
		return segment.Grant{Range: segment.Range{First: 5, Last: 14}}, nil
	})
	var b *segment.Buffer
	b = newBuffer(t, loader, func(c *segment.Config) {
		c.Now = clock.Now
		c.MinBackoff = time.Hour
		c.OnLoad = func(tag string, latency time.Duration, err error) {
			b.Stats() // no lock is held: the hook may call back
			mu.Lock()
			calls = append(calls, call{tag, latency, err})
			mu.Unlock()
		}
	})
	take(t, b, 1)
	take(t, b, 1) // 20% used: the prefetch gets [5,14] again and refuses it
	eventually(t, 5*time.Second, "refused load", func() bool { return b.Stats().Refused == 1 })
	eventually(t, 5*time.Second, "two calls", func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) == 2 })
	mu.Lock()
	defer mu.Unlock()
	// The two loads' hooks run on their own goroutines, in either order.
	first, refused := calls[0], calls[1]
	if first.err != nil {
		first, refused = refused, first
	}
	if c := first; c.tag != "t" || c.latency != 7*time.Millisecond || c.err != nil {
		t.Fatalf("first load: %+v", c)
	}
	if c := refused; c.latency != 7*time.Millisecond || !errors.Is(c.err, segment.ErrRolledBack) {
		t.Fatalf("refused load: %+v", c)
	}
}
