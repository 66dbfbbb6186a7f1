package ratelimit_test

import (
	"testing"
	"time"

	"github.com/idmint/idmint/internal/ratelimit"
)

// TestBucket: a request takes up to what the bucket holds and gives back
// what it did not use, at the time it started; a give-back at a time
// before the bucket's last never credits the refill since again (a
// rate.Limiter's CancelAt does), and never passes the burst.
func TestBucket(t *testing.T) {
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b := ratelimit.NewBucket(100, 1000) // 100 a second, burst 1000
	if n := b.TakeUpTo(at(0), 100); n != 100 {
		t.Fatalf("a full bucket gave %d of 100", n)
	}
	// Half a second later another request takes all there is: 900 and
	// the 50 refilled.
	if n := b.TakeUpTo(at(500*time.Millisecond), 5000); n != 950 {
		t.Fatalf("took %d, want 950", n)
	}
	if n := b.TakeUpTo(at(500*time.Millisecond), 1); n != 0 {
		t.Fatalf("an empty bucket gave %d", n)
	}
	// The first request, begun at t0, gives its 100 back.
	b.Give(at(0), 100)
	if n := b.TakeUpTo(at(500*time.Millisecond), 5000); n != 100 {
		t.Fatalf("after a give-back of 100 dated before the last take: %d, want 100 (no refill credited twice)", n)
	}
	if w := b.Wait(at(500*time.Millisecond), 50); w != 500*time.Millisecond {
		t.Fatalf("Wait for 50 at 100/s from empty: %v, want 500ms", w)
	}
	if b.Full(at(10 * time.Second)) {
		t.Fatal("full after 9.5 s at 100/s from empty: want 950")
	}
	b.Give(at(10*time.Second), 5000) // more than was taken: up to the burst
	if !b.Full(at(10*time.Second)) || b.TakeUpTo(at(10*time.Second), 5000) != 1000 {
		t.Fatal("a give-back past the burst: want the bucket full, 1000")
	}
}
