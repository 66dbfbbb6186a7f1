package allocator_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/storetest"
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

// hangingStore commits its first allocation and never answers it, as a far
// database whose reply is lost: the attempt ends at its timeout. It
// records the time each lookup was given.
type hangingStore struct {
	allocator.Store
	allocs  atomic.Int64
	mu      sync.Mutex // protects lookups
	lookups []time.Duration
}

func (s *hangingStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	if s.allocs.Add(1) > 1 {
		return s.Store.Allocate(ctx, req)
	}
	if _, err := s.Store.Allocate(ctx, req); err != nil {
		return allocator.Segment{}, err
	}
	<-ctx.Done()
	return allocator.Segment{}, fmt.Errorf("%w: reply lost: %w", allocator.ErrAmbiguous, ctx.Err())
}

func (s *hangingStore) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	if d, ok := ctx.Deadline(); ok {
		s.mu.Lock()
		s.lookups = append(s.lookups, time.Until(d))
		s.mu.Unlock()
	}
	return s.Store.Lookup(ctx, id)
}

// TestAllocator_LoadFollowsRoundTrip: a whole load is bounded by three
// attempts at the round trip measured, not by the fixed load timeout fit
// for a nearby database, so that the reply of a far database that is lost
// (its attempt runs to its timeout) is still looked up, and its range
// served, by the same load. Scaled down: a 100 ms attempt floor and a
// 400 ms load floor (serve's 3 s and 10 s), a 25 ms round trip that asks
// for 500 ms attempts (as 300 ms asks for 6 s): the fixed bound would end
// the load before its first attempt times out.
func TestAllocator_LoadFollowsRoundTrip(t *testing.T) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10}); err != nil {
		t.Fatal(err)
	}
	store := &hangingStore{Store: m}
	rt := allocator.NewRoundTrip(20, time.Minute)
	rt.Observe(25 * time.Millisecond)
	a := storetest.NewAllocator(t, store, func(c *allocator.Config) {
		c.AttemptTimeout, c.RoundTrip = 100*time.Millisecond, rt
		c.Segment = segment.Config{LoadTimeout: 400 * time.Millisecond, WaitTimeout: 10 * time.Second}
	})
	attempt := a.RoundTrip().FetchTimeout
	if attempt != 500*time.Millisecond {
		t.Fatalf("attempt timeout %v at a 25 ms round trip; want 500ms", attempt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := a.Next(ctx, "order")
	if err != nil {
		t.Fatal(err)
	}
	st := a.Stats()[0]
	store.mu.Lock()
	lookups := slices.Clone(store.lookups)
	store.mu.Unlock()
	t.Logf("attempt timeout %v: id %d, loads %d, failures %d, recovered %d, lookups given %v", attempt, id, st.Loads, st.LoadFailures, st.Recovered, lookups)
	if id != 1 || st.LoadFailures != 0 || st.Recovered != 1 {
		t.Fatalf("id %d, %d load failures, %d recovered; want the lost reply's range [1, 10] recovered by the first load",
			id, st.LoadFailures, st.Recovered)
	}
	if len(lookups) != 1 || lookups[0] < attempt*9/10 {
		t.Fatalf("lookups given %v; want one, given a whole attempt (%v)", lookups, attempt)
	}
}
