package segment_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

func TestStepPolicy_Runway(t *testing.T) {
	slow := segment.Sample{Used: 100, Elapsed: 15 * time.Minute}
	withPeak := func(s segment.Sample, peak float64) segment.Sample { s.Peak = peak; return s }
	tests := []struct {
		name   string
		policy segment.StepPolicy
		last   int64
		s      segment.Sample
		want   int64
	}{
		{"no runway: the period decides", segment.StepPolicy{Min: 10, Max: 100_000, Period: 15 * time.Minute}, 100, withPeak(slow, 100), 100},
		{"no peak: the period decides", segment.StepPolicy{Min: 10, Max: 100_000, Period: 15 * time.Minute, Runway: 10 * time.Second}, 100, slow, 100},
		// 100 IDs/s for 10 s, with a quarter of headroom: 1,250, past the 4x limit.
		{"runway at the peak rate", segment.StepPolicy{Min: 10, Max: 100_000, Period: 15 * time.Minute, Runway: 10 * time.Second}, 100, withPeak(slow, 100), 1250},
		{"runway bounded by max_step", segment.StepPolicy{Min: 10, Max: 1000, Period: 15 * time.Minute, Runway: 10 * time.Second}, 100, withPeak(slow, 100), 1000},
		{"runway bounded by the default max_step", segment.StepPolicy{Min: 10, Period: 15 * time.Minute, Runway: time.Hour}, 100, withPeak(slow, 1e6), segment.DefaultMaxStep},
		{"the period asks for more: more", segment.StepPolicy{Min: 10, Max: 100_000, Period: time.Minute, Runway: time.Second}, 10_000, withPeak(segment.Sample{Used: 10_000, Elapsed: time.Minute}, 166), 10_000},
		{"huge peak does not overflow", segment.StepPolicy{Min: 1, Max: 1 << 62, Period: time.Hour, Runway: time.Hour}, 1, withPeak(slow, 1e300), 1 << 62},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.Next(tt.last, tt.s); got != tt.want {
				t.Errorf("Next(%d, %+v) = %d, want %d", tt.last, tt.s, got, tt.want)
			}
		})
	}
}

// takeAt takes n IDs, one every `every` on clock.
func takeAt(tb testing.TB, b *segment.Buffer, clock *fakeClock, n int, every time.Duration) {
	tb.Helper()
	for range n {
		clock.Advance(every)
		if _, err := b.Take(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
}

// settle waits for the load in flight, if any, to land.
func settle(tb testing.TB, b *segment.Buffer) {
	tb.Helper()
	eventually(tb, 5*time.Second, "loads to settle", func() bool { return !b.Stats().Loading })
}

// TestBuffer_RunwayPrefetch: with a runway, the next range is fetched while
// the current one still holds the runway at the peak rate, before the
// threshold would start it.
func TestBuffer_RunwayPrefetch(t *testing.T) {
	clock := newFakeClock()
	l := &counterLoader{minStep: 5000, maxStep: 5000}
	b := newBuffer(t, l, func(c *segment.Config) {
		c.Now, c.Threshold, c.Runway = clock.Now, 0.9, 10*time.Second
	})
	// 100 IDs/s through the first range: the peak is 100/s.
	takeAt(t, b, clock, 5001, 10*time.Millisecond) // the last one switches
	settle(t, b)
	st := b.Stats()
	if st.Current == nil || st.Current.First != 5001 || st.Loading || st.NextRange != nil {
		t.Fatalf("after the first range: %+v", st)
	}
	// Take from the second range until its next load starts; the runway
	// needs 1,000 IDs at 100/s, the threshold (90%) would leave 500.
	for i := 0; ; i++ {
		st = b.Stats()
		if st.Loading || st.NextRange != nil {
			break
		}
		if i > 5000 {
			t.Fatal("no load started in the whole second range")
		}
		takeAt(t, b, clock, 1, 10*time.Millisecond)
	}
	if need := int64(10 * st.Peak); st.Remaining < need {
		t.Fatalf("the next load started with %d IDs left, below the runway's %d at %.0f/s: %+v", st.Remaining, need, st.Peak, st)
	}
	settle(t, b)
	if st := b.Stats(); !st.RunwayMet || st.RunwayHeld < 10*time.Second {
		t.Fatalf("with the next range loaded: runway held %v, met %v, want at least 10s", st.RunwayHeld, st.RunwayMet)
	}
}

func TestBuffer_RunwayMet(t *testing.T) {
	const runway = 10 * time.Second
	t.Run("met at a steady rate", func(t *testing.T) {
		clock := newFakeClock()
		b := newBuffer(t, &counterLoader{minStep: 100}, func(c *segment.Config) { c.Now, c.Runway = clock.Now, runway })
		for range 10 {
			takeAt(t, b, clock, 500, 10*time.Millisecond)
			settle(t, b)
		}
		if st := b.Stats(); !st.RunwayMet || st.RunwayShort != "" || st.Runway != runway {
			t.Fatalf("steady 100/s: %+v", st)
		}
	})
	t.Run("max_step too small", func(t *testing.T) {
		clock := newFakeClock()
		b := newBuffer(t, &counterLoader{minStep: 100, maxStep: 300}, func(c *segment.Config) { c.Now, c.Runway = clock.Now, runway })
		for range 10 {
			takeAt(t, b, clock, 500, 10*time.Millisecond)
			settle(t, b)
		}
		// Both ranges hold at most 600 IDs: 6 s at 100/s.
		st := b.Stats()
		if st.RunwayMet || st.RunwayShort != segment.RunwayShortMaxStep || st.RunwayHeld > 6*time.Second {
			t.Fatalf("max_step 300 at 100/s: %+v", st)
		}
	})
	t.Run("store unavailable", func(t *testing.T) {
		clock := newFakeClock()
		l := &counterLoader{minStep: 100}
		b := newBuffer(t, l, func(c *segment.Config) { c.Now, c.Runway, c.MinBackoff = clock.Now, runway, time.Hour })
		for range 5 {
			takeAt(t, b, clock, 500, 10*time.Millisecond)
			settle(t, b)
		}
		l.setFail(errors.New("database down"))
		for i := 0; b.Stats().RunwayMet; i++ {
			if i > 100_000 {
				t.Fatal("still met after 100,000 takes with the loader down")
			}
			takeAt(t, b, clock, 1, 10*time.Millisecond)
		}
		if st := b.Stats(); st.RunwayShort != segment.RunwayShortStore || st.RunwayHeld >= runway {
			t.Fatalf("loader down: %+v", st)
		}
	})
	t.Run("a load hangs", func(t *testing.T) {
		clock := newFakeClock()
		l := &counterLoader{minStep: 100}
		b := newBuffer(t, l, func(c *segment.Config) { c.Now, c.Runway = clock.Now, runway })
		for range 5 {
			takeAt(t, b, clock, 500, 10*time.Millisecond)
			settle(t, b)
		}
		l.mu.Lock()
		l.block = make(chan struct{})
		l.mu.Unlock()
		defer close(l.block)
		for i := 0; !b.Stats().Loading; i++ {
			if i > 100_000 {
				t.Fatal("no load started in 100,000 takes")
			}
			takeAt(t, b, clock, 1, 10*time.Millisecond)
		}
		for i := 0; b.Stats().RunwayMet; i++ {
			if i > 100_000 {
				t.Fatal("still met after 100,000 takes with the load hanging")
			}
			takeAt(t, b, clock, 1, 10*time.Millisecond)
		}
		takeAt(t, b, clock, 100, 10*time.Millisecond) // a second past the edge
		clock.Advance(2 * time.Second)
		if st := b.Stats(); st.RunwayShort != segment.RunwayShortStore || !st.Loading {
			t.Fatalf("a load hanging for seconds: %+v", st)
		}
	})
	t.Run("rate jumped", func(t *testing.T) {
		clock := newFakeClock()
		// A late threshold: no load starts during the burst.
		b := newBuffer(t, &counterLoader{minStep: 1000}, func(c *segment.Config) { c.Now, c.Runway, c.Threshold = clock.Now, runway, 0.95 })
		takeAt(t, b, clock, 50, 100*time.Millisecond) // 10/s
		settle(t, b)
		if st := b.Stats(); !st.RunwayMet {
			t.Fatalf("at 10/s: %+v", st)
		}
		takeAt(t, b, clock, 500, time.Millisecond) // 1,000/s for half a second
		settle(t, b)
		clock.Advance(600 * time.Millisecond)
		st := b.Stats()
		if st.RunwayMet || st.RunwayShort != segment.RunwayShortRate || st.Peak < 400 {
			t.Fatalf("after a burst: %+v", st)
		}
	})
	t.Run("no runway: always met", func(t *testing.T) {
		clock := newFakeClock()
		b := newBuffer(t, &counterLoader{minStep: 10, maxStep: 10}, func(c *segment.Config) { c.Now = clock.Now })
		takeAt(t, b, clock, 500, time.Millisecond)
		if st := b.Stats(); !st.RunwayMet || st.Runway != 0 {
			t.Fatalf("no runway: %+v", st)
		}
	})
}

// TestBuffer_RunwayFromGrant: a tag's own runway, carried by its grants,
// overrides the buffer's.
func TestBuffer_RunwayFromGrant(t *testing.T) {
	l := segment.LoaderFunc(func(_ context.Context, size int64) (segment.Grant, error) {
		return segment.Grant{Range: segment.Range{First: 1, Last: 100}, MinStep: 100, Runway: time.Minute}, nil
	})
	b := newBuffer(t, l, func(c *segment.Config) { c.Runway = time.Second })
	if _, err := b.Take(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Runway != time.Minute {
		t.Fatalf("runway %v, want the tag's 1m", st.Runway)
	}
}
