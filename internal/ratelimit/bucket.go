package ratelimit

import (
	"math"
	"sync"
	"time"
)

// Bucket is a token bucket for charges settled after the fact: a request
// takes up front what it may use (TakeUpTo), and gives back what it did not
// (Give) once it knows. Unlike a rate.Limiter, whose CancelAt at a time
// before its last event moves its clock back (so that the interval between
// is refilled twice), a Bucket never moves its clock back: a time before
// its last is read as its last. Giving back never credits more than was
// taken, and never past the burst. It is safe for concurrent use.
type Bucket struct {
	perSecond, burst float64

	mu     sync.Mutex // protects tokens and last
	tokens float64
	last   time.Time // when tokens was true; the zero time: never used
}

// NewBucket returns a full bucket that refills at perSecond up to burst.
func NewBucket(perSecond float64, burst int64) *Bucket {
	return &Bucket{perSecond: perSecond, burst: float64(burst), tokens: float64(burst)}
}

// advanceLocked refills the bucket up to now; a now before its last moves
// nothing.
func (b *Bucket) advanceLocked(now time.Time) {
	if b.last.IsZero() {
		b.last = now
		return
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.perSecond)
		b.last = now
	}
}

// TakeUpTo takes as many of n whole tokens as the bucket holds at now, and
// returns how many (0 when it holds less than one).
func (b *Bucket) TakeUpTo(now time.Time, n int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	k := min(n, int64(math.Floor(b.tokens)))
	if k <= 0 {
		return 0
	}
	b.tokens -= float64(k)
	return k
}

// Give gives back n tokens taken before, up to the burst.
func (b *Bucket) Give(now time.Time, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.tokens = min(b.burst, b.tokens+float64(n))
}

// Wait returns how long from now until the bucket holds n tokens (n at
// most the burst).
func (b *Bucket) Wait(now time.Time, n int64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	short := min(float64(n), b.burst) - b.tokens
	if short <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(short / b.perSecond * float64(time.Second)))
}

// Full reports whether the bucket is full at now: idle, as a new one is.
func (b *Bucket) Full(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	return b.tokens >= b.burst
}
