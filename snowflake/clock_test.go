package snowflake_test

import (
	"context"
	"sync"
	"time"
)

// fakeClock is a clock a test moves, forwards and backwards. Sleep moves it
// forward by the time asked, so waits take no real time.
type fakeClock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Add(max(d, 0))
	return nil
}
