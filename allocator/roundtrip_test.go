package allocator_test

import (
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
		{"one slow round trip moves an eighth", []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond}, 18 * time.Second},
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

	t.Run("rises with the round trip and falls back when it goes away", func(t *testing.T) {
		rt := allocator.NewRoundTrip(20, ceiling)
		rt.Observe(time.Millisecond)
		if got := rt.Timeout(floor); got != floor {
			t.Fatalf("nearby: %v, want the floor %v", got, floor)
		}
		for range 50 {
			rt.Observe(800 * time.Millisecond)
		}
		far := rt.Timeout(floor)
		if far <= 15*time.Second || far > 16*time.Second {
			t.Fatalf("after 50 round trips of 800ms: %v, want close to 16s", far)
		}
		n := 0
		for ; rt.Timeout(floor) > floor && n < 100; n++ {
			rt.Observe(time.Millisecond)
		}
		if rt.Timeout(floor) != floor {
			t.Fatalf("still %v after 100 nearby round trips", rt.Timeout(floor))
		}
		t.Logf("back to the floor after %d nearby round trips", n)
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
