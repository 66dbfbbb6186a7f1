package snowflake

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// pinnedClock is a clock that moves only when the test sets it.
type pinnedClock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

func (c *pinnedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *pinnedClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *pinnedClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// awayStore is the lease store of a database that went away and came back:
// renewals fail, releases and acquisitions work. Its clock is the node's.
// onRelease, if set, runs inside Release: a request that arrives while the
// release is on its way.
type awayStore struct {
	clock *pinnedClock

	mu        sync.Mutex // protects the fields below
	epoch     int64
	floor     int64 // the time floor, as Release left it
	released  bool
	onRelease func()
}

func (s *awayStore) Prepare(context.Context, Layout) error { return nil }

func (s *awayStore) Acquire(_ context.Context, req AcquireRequest) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now().UnixMilli()
	s.epoch++
	start := s.floor + 1
	if !s.released {
		start = max(start, now)
	}
	s.released = false
	return Lease{Worker: 0, Epoch: s.epoch, Holder: req.Holder, Start: start, Expires: now + req.TTL.Milliseconds(), DBTime: now}, nil
}

func (s *awayStore) Renew(context.Context, Lease, time.Duration, time.Duration) (Lease, error) {
	return Lease{}, errors.New("database away")
}

func (s *awayStore) Release(_ context.Context, _ Lease, floor int64) error {
	s.mu.Lock()
	hook := s.onRelease
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	s.mu.Lock()
	s.floor, s.released = floor, true
	s.mu.Unlock()
	return nil
}

// TestNode_RestartReleasesAfterTheLastID: a lease whose window ended
// unrenewed is released with the last millisecond used as its time floor,
// and the next holder of the worker ID starts after it. A request served
// while the release is on its way, at the very instant the window ends, must
// not put a later millisecond in an ID than that floor: the next holder
// would issue the same IDs.
func TestNode_RestartReleasesAfterTheLastID(t *testing.T) {
	t0 := time.UnixMilli(1_900_000_000_000)
	clock := &pinnedClock{t: t0}
	store := &awayStore{clock: clock}
	const ttl, margin = time.Hour, time.Second
	n, err := Start(context.Background(), Config{
		Layout: DefaultLayout(), Store: store, Holder: "a", Clock: clock,
		// Renewals on the node's own timer would come after the test.
		TTL: ttl, Margin: margin, RenewEvery: 20 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	if _, err := n.Next(t.Context()); err != nil {
		t.Fatal(err)
	}

	var late []int64
	store.mu.Lock()
	store.onRelease = func() {
		if id, err := n.Next(t.Context()); err == nil {
			late = append(late, id)
		}
	}
	store.mu.Unlock()
	// The window ends now, by the node's clock: the lease was taken at t0.
	clock.set(t0.Add(ttl - margin))
	n.renew(t.Context())
	store.mu.Lock()
	store.onRelease = nil
	floor := store.floor
	store.mu.Unlock()

	for _, id := range late {
		p, err := DefaultLayout().Parse(id)
		if err != nil {
			t.Fatal(err)
		}
		if ms := p.Time.UnixMilli(); ms > floor {
			t.Fatalf("id %d of millisecond %d issued after the window ended, above the released time floor %d: the next holder of worker %d starts at %d",
				id, ms, floor, p.Worker, floor+1)
		}
	}
}
