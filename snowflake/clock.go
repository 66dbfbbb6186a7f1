package snowflake

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Clock is the generator's time source. Tests inject one that jumps.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx ends (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

// MonotonicClock reads the wall clock once, when it is made, and from then
// on counts the monotonic clock's time since: a wall-clock step (NTP, an
// operator, a VM migration) changes nothing in a running process. Only
// Reanchor reads the wall clock again; a Node does so when the database's
// clock agrees with the host's wall clock and not with this clock (the
// wall clock was stepped right after the process started).
type MonotonicClock struct {
	a atomic.Pointer[anchor]
}

// anchor is a wall-clock reading with the monotonic reading taken with it.
type anchor struct {
	mono time.Time // carries a monotonic reading
	wall time.Time // mono's wall time, without it
}

var _ Clock = (*MonotonicClock)(nil)

// NewMonotonicClock returns a clock anchored at the current wall time.
func NewMonotonicClock() *MonotonicClock {
	c := &MonotonicClock{}
	c.Reanchor()
	return c
}

// Now implements Clock: the anchor's wall time plus monotonic time elapsed.
func (c *MonotonicClock) Now() time.Time {
	a := c.a.Load()
	return a.wall.Add(time.Since(a.mono))
}

// Reanchor reads the wall clock again and returns how far the clock moved.
func (c *MonotonicClock) Reanchor() time.Duration {
	now := time.Now()
	old := c.a.Swap(&anchor{mono: now, wall: now.Round(0)})
	if old == nil {
		return 0
	}
	return now.Round(0).Sub(old.wall.Add(now.Sub(old.mono)))
}

// spinBelow is the wait under which Sleep yields in a loop rather than
// arming a timer: waits for the next millisecond are shorter than a timer's
// slack.
const spinBelow = 2 * time.Millisecond

// Sleep implements Clock.
func (c *MonotonicClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if d < spinBelow {
		until := time.Now().Add(d)
		for time.Now().Before(until) {
			if err := ctx.Err(); err != nil {
				return err
			}
			runtime.Gosched()
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
