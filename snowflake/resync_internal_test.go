package snowflake

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// agreeingStore is a LeaseStore for one node whose clock is the host's wall
// clock: worker 0, epoch 1, renewed at will.
type agreeingStore struct{}

func (agreeingStore) Prepare(context.Context, Layout) error { return nil }

func (agreeingStore) Acquire(_ context.Context, req AcquireRequest) (Lease, error) {
	now := time.Now().UnixMilli()
	return Lease{Worker: 0, Epoch: 1, Holder: req.Holder, Start: 1, Expires: now + req.TTL.Milliseconds(), DBTime: now}, nil
}

func (agreeingStore) Renew(_ context.Context, l Lease, ttl, _ time.Duration) (Lease, error) {
	now := time.Now().UnixMilli()
	l.Expires, l.DBTime = now+ttl.Milliseconds(), now
	return l, nil
}

func (agreeingStore) Release(context.Context, Lease, int64) error { return nil }

// TestNode_ResyncsAfterWallClockCorrection: a process whose clock was
// anchored while the host's wall clock was off (started before NTP stepped
// it right) disagrees with the database, whose clock agrees with the host's
// now. It refuses at first, then takes the wall clock again and serves IDs
// of the true time, instead of refusing until it is restarted.
func TestNode_ResyncsAfterWallClockCorrection(t *testing.T) {
	for _, off := range []time.Duration{5 * time.Second, -5 * time.Second} {
		t.Run(off.String(), func(t *testing.T) {
			clock := NewMonotonicClock()
			clock.a.Store(&anchor{mono: time.Now(), wall: time.Now().Round(0).Add(off)})
			n, err := Start(context.Background(), Config{
				Layout: DefaultLayout(), Store: agreeingStore{}, Holder: "a", Clock: clock,
				TTL: 2 * time.Second, Margin: 100 * time.Millisecond, RenewEvery: 200 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for {
				id, err := n.Next(ctx)
				if err == nil {
					p, _ := DefaultLayout().Parse(id)
					if d := time.Since(p.Time).Abs(); d > time.Second {
						t.Fatalf("id of %v, %v from the true time", p.Time, d)
					}
					return
				}
				if !errors.Is(err, ErrClockSkew) && !errors.Is(err, ErrClockBackwards) {
					t.Fatalf("Next = %v", err)
				}
				if ctx.Err() != nil {
					t.Fatalf("still refusing after 5 s (%v): the clock never takes the corrected wall clock again", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
