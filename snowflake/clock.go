package snowflake

import (
	"context"
	"runtime"
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
// operator, a VM migration) changes nothing in a running process.
type MonotonicClock struct {
	anchor time.Time // carries a monotonic reading
	wall   time.Time // anchor without it
}

var _ Clock = (*MonotonicClock)(nil)

// NewMonotonicClock returns a clock anchored at the current wall time.
func NewMonotonicClock() *MonotonicClock {
	now := time.Now()
	return &MonotonicClock{anchor: now, wall: now.Round(0)}
}

// Now implements Clock: the anchor's wall time plus monotonic time elapsed.
func (c *MonotonicClock) Now() time.Time { return c.wall.Add(time.Since(c.anchor)) }

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
