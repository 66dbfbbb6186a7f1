package snowflake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/snowtest"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/testutil"
)

// take asks n for count IDs one by one and acknowledges them to c as client.
func take(tb testing.TB, n *snowflake.Node, c *checker.Checker, client string, count int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range count {
		id, err := n.Next(ctx)
		if err != nil {
			tb.Fatalf("%s: %v", client, err)
		}
		c.Ack(client, "snowflake", id)
	}
}

func TestNode_AllWorkerIDsHeld(t *testing.T) {
	store := lease.NewMemory(nil)
	cfg := snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, TTL: 2 * time.Second, Margin: 100 * time.Millisecond, RenewEvery: 200 * time.Millisecond}
	c := checker.New()
	cfg.Holder = "a"
	a := snowtest.Start(t, cfg)
	cfg.Holder = "b"
	b := snowtest.Start(t, cfg)
	cfg.Holder = "c"
	extra := snowtest.Start(t, cfg)
	if _, err := extra.Next(context.Background()); !errors.Is(err, snowflake.ErrNoWorker) {
		t.Fatalf("third node on two worker ids: Next = %v, want ErrNoWorker", err)
	}
	if st := extra.Stats(); st.Worker != -1 || st.RefusedNoWorker != 1 || !errors.Is(st.Serving, snowflake.ErrNoWorker) {
		t.Fatalf("stats of the node without a worker id: %+v", st)
	}
	take(t, a, c, "a", 5000)
	take(t, b, c, "b", 5000)
	aWorker := a.Stats().Worker
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The extra node keeps trying and takes the released worker ID.
	testutil.Eventually(t, 10*time.Second, "the extra node to lease the released worker id", func() bool { return extra.Stats().Worker == aWorker })
	if st := extra.Stats(); st.Epoch != 2 {
		t.Fatalf("epoch of the second holder: %+v", st)
	}
	take(t, extra, c, "c", 5000)
	take(t, b, c, "b", 5000)
	check(t, c, 20000)
}

func TestNode_ClockSkew(t *testing.T) {
	// The database's clock is 5 s ahead of this instance's.
	store := lease.NewMemory(func() time.Time { return time.Now().Add(5 * time.Second) })
	n := snowtest.Start(t, snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Holder: "a"})
	if _, err := n.Next(context.Background()); !errors.Is(err, snowflake.ErrClockSkew) {
		t.Fatalf("Next with the database 5 s ahead = %v, want ErrClockSkew", err)
	}
	st := n.Stats()
	if st.ClockOffset < 4*time.Second || st.ClockOffset > 6*time.Second || st.Worker != 0 || st.RefusedSkew != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestNode_ClockAheadWithinMargin: this instance's clock runs 400 ms ahead
// of the database's, within the 1 s margin, so the node serves. Its lease
// window ends by the database's clock (expiry minus margin) 400 ms before
// its deadline by this clock: between the two, a node that renewed no more
// must refuse, as the IDs it would issue lie past the window's end, in time
// the next holder of the worker ID may already use.
func TestNode_ClockAheadWithinMargin(t *testing.T) {
	const ahead = 400 * time.Millisecond
	clock := newFakeClock(t0)
	store := lease.NewMemory(func() time.Time { return clock.Now().Add(-ahead) })
	// A TTL of an hour: no renewal (every 10 min by the real clock) runs
	// while the fake clock walks to the window's end.
	n := snowtest.Start(t, snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Holder: "a", Clock: clock, TTL: time.Hour, Margin: time.Second})
	if _, err := n.Next(context.Background()); err != nil {
		t.Fatalf("Next with the clock %v ahead, margin 1s: %v", ahead, err)
	}
	// The window ends at the expiry (database time t0-400ms+1h) minus the
	// margin; the deadline is 400 ms later by this clock.
	end := t0.Add(-ahead + time.Hour - time.Second)
	clock.Add(end.Sub(t0))
	id, err := n.Next(context.Background())
	if p, _ := n.Layout().Parse(id); err != nil || p.UnixMilli != end.UnixMilli() {
		t.Fatalf("Next at the window's last millisecond = id at %d, %v; want %d", p.UnixMilli, err, end.UnixMilli())
	}
	clock.Add(ahead / 2) // past the window's end, before the deadline
	if id, err := n.Next(context.Background()); !errors.Is(err, snowflake.ErrLeaseExpired) {
		p, _ := n.Layout().Parse(id)
		t.Fatalf("Next %v past the window's end = id at %d (end %d), %v; want ErrLeaseExpired", ahead/2, p.UnixMilli, end.UnixMilli(), err)
	}
	if st := n.Stats(); st.RefusedExpired != 1 || st.ClockOffset != -ahead {
		t.Fatalf("stats: refused expired %d, clock offset %v; want 1 and %v", st.RefusedExpired, st.ClockOffset, -ahead)
	}
}

// TestNode_RestartReusesWorkerID: an instance restarted with its clock set
// back (a host clock stepped back at reboot; the database on the same host
// sees the same clock) takes its old worker ID again, and its time floor
// keeps it from reusing a millisecond: a short step back costs a wait, a
// long one a refusal, never a duplicate.
func TestNode_RestartReusesWorkerID(t *testing.T) {
	for _, c := range []struct {
		name   string
		back   time.Duration
		refuse bool
	}{
		{"1ms back", time.Millisecond, false},
		{"10s back", 10 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock(t0)
			store := lease.NewMemory(clock.Now)
			cfg := snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Holder: "a", Clock: clock}
			ids := checker.New()
			first := snowtest.Start(t, cfg)
			take(t, first, ids, "a", 10_000)
			st := first.Stats()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := first.Close(ctx); err != nil {
				t.Fatal(err)
			}
			clock.Add(-c.back)
			again := snowtest.Start(t, cfg)
			if got := again.Stats(); got.Worker != st.Worker || got.Epoch != st.Epoch+1 {
				t.Fatalf("restarted: worker %d epoch %d, want worker %d epoch %d", got.Worker, got.Epoch, st.Worker, st.Epoch+1)
			}
			if c.refuse {
				if _, err := again.Next(context.Background()); !errors.Is(err, snowflake.ErrClockBackwards) {
					t.Fatalf("Next = %v, want ErrClockBackwards", err)
				}
				clock.Add(c.back)
			}
			take(t, again, ids, "a", 10_000)
			check(t, ids, 20_000)
		})
	}
}

func TestStart_InvalidConfig(t *testing.T) {
	store := lease.NewMemory(nil)
	long := make([]byte, snowflake.MaxHolder+1)
	for i := range long {
		long[i] = 'x'
	}
	// 35 time bits from an epoch 2^35 ms and a minute ago: no millisecond
	// left.
	usedUp := snowflake.Layout{TimeBits: 35, WorkerBits: 12, SequenceBits: 16}
	usedUp.Epoch = time.Now().Add(-time.Duration(usedUp.MaxMillis())*time.Millisecond - time.Minute).Truncate(time.Millisecond)
	for _, c := range []struct {
		name string
		cfg  snowflake.Config
	}{
		{"no store", snowflake.Config{Layout: snowtest.TwoWorkers}},
		{"invalid layout", snowflake.Config{Layout: snowflake.Layout{TimeBits: 41, WorkerBits: 10, SequenceBits: 13}, Store: store}},
		{"holder too long", snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Holder: string(long)}},
		{"ttl under 4 margins", snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, TTL: 3 * time.Second, Margin: time.Second}},
		{"margin under 1ms", snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Margin: time.Microsecond}},
		{"renewal too rare", snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, TTL: 10 * time.Second, Margin: time.Second, RenewEvery: 5 * time.Second}},
		{"layout's time used up", snowflake.Config{Layout: usedUp, Store: lease.NewMemory(nil)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Logger = testlog.Discard()
			if n, err := snowflake.Start(context.Background(), c.cfg); err == nil {
				n.Close(context.Background())
				t.Fatal("started")
			}
		})
	}
	// A layout other than the store's: refused at start.
	snowtest.Start(t, snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Holder: "a"})
	other := snowtest.TwoWorkers
	other.Epoch = other.Epoch.Add(time.Hour)
	if _, err := snowflake.Start(context.Background(), snowflake.Config{Layout: other, Store: store, Logger: testlog.Discard()}); !errors.Is(err, snowflake.ErrLayoutMismatch) {
		t.Fatalf("Start with another epoch = %v, want ErrLayoutMismatch", err)
	}
}
