package snowflake_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/snowtest"
)

// awayLeases is a lease store whose database went away for renewals only:
// they fail, while releases and acquisitions work. onRelease runs inside
// Release, before the floor is stored: a request arriving while the release
// is on its way.
type awayLeases struct {
	*lease.Memory

	mu        sync.Mutex // protects the fields below
	onRelease func()
	floors    []int64 // the time floors released, in order
}

func (s *awayLeases) Renew(context.Context, snowflake.Lease, time.Duration, time.Duration) (snowflake.Lease, error) {
	return snowflake.Lease{}, errors.New("database away")
}

func (s *awayLeases) Release(ctx context.Context, l snowflake.Lease, floor int64) error {
	s.mu.Lock()
	hook := s.onRelease
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	err := s.Memory.Release(ctx, l, floor)
	s.mu.Lock()
	s.floors = append(s.floors, floor)
	s.mu.Unlock()
	return err
}

func (s *awayLeases) released() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.floors...)
}

// TestNode_RestartReleasesAfterTheLastID: a lease whose window ended
// unrenewed is released with the last millisecond used as its time floor,
// and the next holder of the worker ID starts after it. A request served
// while the release is on its way, at the very instant the window ends, must
// not put a later millisecond in an ID than that floor: the next holder
// would issue the same IDs.
func TestNode_RestartReleasesAfterTheLastID(t *testing.T) {
	t0 := time.UnixMilli(1_900_000_000_000)
	clock := newFakeClock(t0)
	store := &awayLeases{Memory: lease.NewMemory(clock.Now)}
	const ttl, margin = time.Hour, time.Second
	n := snowtest.Start(t, snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Holder: "a", Clock: clock,
		TTL: ttl, Margin: margin, RenewEvery: 5 * time.Millisecond})
	if _, err := n.Next(t.Context()); err != nil {
		t.Fatal(err)
	}

	var (
		mu   sync.Mutex // protects late
		late []int64
	)
	store.mu.Lock()
	store.onRelease = func() {
		if id, err := n.Next(context.Background()); err == nil {
			mu.Lock()
			late = append(late, id)
			mu.Unlock()
		}
	}
	store.mu.Unlock()
	// The window ends now, by the node's clock (the lease was taken at
	// t0); the node's next renewal finds it ended and releases it.
	clock.Add(ttl - margin)
	deadline := time.Now().Add(10 * time.Second)
	for len(store.released()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the ended lease was not released within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	store.mu.Lock()
	store.onRelease = nil
	store.mu.Unlock()

	floor := store.released()[0]
	mu.Lock()
	defer mu.Unlock()
	for _, id := range late {
		p, err := snowtest.TwoWorkers.Parse(id)
		if err != nil {
			t.Fatal(err)
		}
		if p.UnixMilli > floor {
			t.Fatalf("id %d of millisecond %d issued after the window ended, above the released time floor %d: the next holder of worker %d starts at %d",
				id, p.UnixMilli, floor, p.Worker, floor+1)
		}
	}
}
