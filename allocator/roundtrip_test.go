package allocator_test

import (
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
)

// TestRoundTrip_Timeout: the timeout is the floor for a nearby database,
// factor × RTT for a far one, never above the ceiling, and falls back to the
// floor once the latency goes away.
func TestRoundTrip_Timeout(t *testing.T) {
	const floor, ceiling = 3 * time.Second, 30 * time.Second
	tests := []struct {
		name    string
		samples []time.Duration
		want    time.Duration
	}{
		{"no sample: the floor", nil, floor},
		{"nearby: the floor", []time.Duration{time.Millisecond, 2 * time.Millisecond}, floor},
		{"100ms each way: the floor", []time.Duration{100 * time.Millisecond}, floor},
		{"150ms each way: twenty round trips", []time.Duration{300 * time.Millisecond}, 6 * time.Second},
		{"400ms each way: twenty round trips", []time.Duration{800 * time.Millisecond}, 16 * time.Second},
		{"a satellite: the ceiling", []time.Duration{5 * time.Second}, ceiling},
		{"a slower exchange does not raise it", []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond}, 16 * time.Second},
		{"a faster one lowers it", []time.Duration{800 * time.Millisecond, 400 * time.Millisecond}, 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := allocator.NewRoundTrip(20, ceiling)
			for _, d := range tt.samples {
				rt.Observe(d)
			}
			if got := rt.Timeout(floor); got != tt.want {
				t.Fatalf("Timeout(%v) after %v = %v, want %v", floor, tt.samples, got, tt.want)
			}
		})
	}

	t.Run("rises with the round trip once the window passes, falls back at once", func(t *testing.T) {
		clock := time.Unix(1_700_000_000, 0)
		rt := allocator.NewRoundTripClock(20, ceiling, func() time.Time { return clock })
		rt.Observe(time.Millisecond)
		start := clock
		// The database moves 400 ms away each way: every exchange takes
		// 800 ms from now on, ten a second.
		n := 0
		for ; rt.Timeout(floor) == floor && n < 1000; n++ {
			clock = clock.Add(100 * time.Millisecond)
			rt.Observe(800 * time.Millisecond)
		}
		rose := clock.Sub(start)
		if got := rt.Timeout(floor); got != 16*time.Second {
			t.Fatalf("after %v of round trips of 800ms: %v, want 16s", rose, got)
		}
		if rose > allocator.RoundTripWindow || rose < allocator.RoundTripWindow*3/4 {
			t.Fatalf("rose after %v, want within the window of %v, not before most of it", rose, allocator.RoundTripWindow)
		}
		rt.Observe(time.Millisecond)
		if got := rt.Timeout(floor); got != floor {
			t.Fatalf("after one nearby round trip: %v, want the floor %v", got, floor)
		}
	})

	t.Run("slow statements and lock waits do not raise it", func(t *testing.T) {
		clock := time.Unix(1_700_000_000, 0)
		rt := allocator.NewRoundTripClock(20, ceiling, func() time.Time { return clock })
		rt.Observe(300 * time.Microsecond) // a ping, a begin: the network
		for i := range 100 {
			// Exchanges that waited on the server: a statement that reads a
			// long log, a give-back behind a row lock (190 ms to 2 s).
			clock = clock.Add(20 * time.Millisecond)
			rt.Observe(190*time.Millisecond + time.Duration(i)*18*time.Millisecond)
		}
		if got := rt.Estimate(); got != 300*time.Microsecond {
			t.Fatalf("estimate %v after slow statements, want the network's 300µs", got)
		}
		if got := rt.Timeout(floor); got != floor {
			t.Fatalf("timeout %v after slow statements, want the floor %v", got, floor)
		}
	})

	t.Run("a window without round trips keeps the last known", func(t *testing.T) {
		clock := time.Unix(1_700_000_000, 0)
		rt := allocator.NewRoundTripClock(20, ceiling, func() time.Time { return clock })
		rt.Observe(300 * time.Millisecond)
		clock = clock.Add(time.Hour)
		if got := rt.Estimate(); got != 300*time.Millisecond {
			t.Fatalf("after an idle hour: %v, want the last known 300ms", got)
		}
		rt.Observe(400 * time.Millisecond)
		if got := rt.Estimate(); got != 400*time.Millisecond {
			t.Fatalf("the first round trip after an idle hour: %v, want it, 400ms", got)
		}
	})

	t.Run("concurrent use", func(t *testing.T) {
		clock := time.Unix(1_700_000_000, 0)
		rt := allocator.NewRoundTripClock(20, ceiling, func() time.Time { return clock })
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 1000 {
					rt.Observe(time.Duration(1+g+i) * time.Millisecond)
					_ = rt.Timeout(floor)
				}
			})
		}
		wg.Wait()
		if got := rt.Estimate(); got != time.Millisecond {
			t.Fatalf("estimate %v, want the least seen, 1ms", got)
		}
	})

	t.Run("a floor above the ceiling is kept", func(t *testing.T) {
		rt := allocator.NewRoundTrip(20, time.Second)
		rt.Observe(time.Second)
		if got := rt.Timeout(floor); got != floor {
			t.Fatalf("%v, want the floor %v", got, floor)
		}
	})

	t.Run("nil measures nothing", func(t *testing.T) {
		var rt *allocator.RoundTrip
		rt.Observe(time.Second)
		if got := rt.Timeout(floor); got != floor || rt.Estimate() != 0 {
			t.Fatalf("nil: timeout %v, estimate %v", got, rt.Estimate())
		}
	})
}
