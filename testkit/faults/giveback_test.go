package faults_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
)

// rollingRestart runs workers against instances slots and restarts each
// slot restarts times (Close, which gives back, then a new instance), then
// closes them all, newest range first. It returns the checker report and
// the gap: IDs below max_id never handed out.
func rollingRestart(t *testing.T, store *postgres.Store, slots, restarts int, giveBack bool) (checker.Report, int64) {
	t.Helper()
	ctx := context.Background()
	var instStore allocator.Store = store
	if !giveBack {
		instStore = noGiveBack{store}
	}
	insts := make([]atomic.Pointer[allocator.Allocator], slots)
	for i := range insts {
		insts[i].Store(newInstance(t, instStore, fmt.Sprint("rolling-", i), nil))
	}
	c := checker.New()
	l := startLoad(c, 4*slots, func(ctx context.Context, w int) (string, string, int64, error) {
		slot := w % slots
		id, err := insts[slot].Load().Next(ctx, "order")
		// A new instance is a new client: the old one's IDs may be higher
		// than the new one's first ones only if a give-back was wrong, and
		// then the checker catches the duplicate anyway.
		return fmt.Sprint("worker-", w), "order", id, err
	})
	defer l.stop()
	for range restarts {
		for i := range insts {
			time.Sleep(150 * time.Millisecond)
			// Stop, then start again: requests meanwhile get ErrClosed.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := insts[i].Load().Close(cctx); err != nil {
				t.Errorf("close: %v", err)
			}
			cancel()
			insts[i].Store(newInstance(t, instStore, fmt.Sprint("rolling-", i), nil))
		}
	}
	time.Sleep(150 * time.Millisecond)
	l.stop()
	// A full stop: the instance holding the newest range first, so that
	// each give-back finds max_id at the end of its range.
	for len(insts) > 0 {
		newest := 0
		for i := range insts {
			if tagStats(insts[i].Load(), "order").Highest > tagStats(insts[newest].Load(), "order").Highest {
				newest = i
			}
		}
		if err := insts[newest].Load().Close(ctx); err != nil {
			t.Fatal(err)
		}
		insts = append(insts[:newest], insts[newest+1:]...)
	}
	r := c.Report()
	return r, maxID(t, store, "order") - r.Tag("order").Distinct
}

// noGiveBack hides the store's GiveBack: instances over it abandon their
// unused ranges at Close, as before give-back existed.
type noGiveBack struct{ allocator.Store }

// GiveBack takes nothing back: the range stays a gap.
func (noGiveBack) GiveBack(context.Context, string, int64, int64) (bool, error) { return false, nil }

// TestGracefulShutdownGivesBack: on Close an instance returns the unused
// tail of its newest range, with a compare-and-set on max_id. A rolling
// restart of one instance under load leaves (almost) no gap, far less than
// the same restarts without give-back leave; with several instances the
// give-back is a no-op whenever another instance allocated since, and no ID
// is ever handed out twice.
func TestGracefulShutdownGivesBack(t *testing.T) {
	const step = 100
	srv := pgtest.Shared(t)

	t.Run("rolling restart of one instance under load", func(t *testing.T) {
		const restarts = 5
		run := func(giveBack bool) (checker.Report, int64) {
			store := pgstore.Open(t, pgstore.NewDatabase(t, srv))
			createTag(t, store, "order", step, step)
			r, gap := rollingRestart(t, store, 1, restarts, giveBack)
			requireValid(t, r)
			return r, gap
		}
		r, gap := run(true)
		without, gapWithout := run(false)
		t.Logf("1 instance, %d restarts and a stop under load: %d ids, gap %d with give-back; %d ids, gap %d without",
			restarts, r.IDs(), gap, without.IDs(), gapWithout)
		// Every Close gives the rest of the current and the next range
		// back; what may stay is one range whose load Close could not wait
		// for (a loaded machine): at most 2 segments in all, for 6 stops.
		if limit := int64(2 * step); gap > limit {
			t.Fatalf("gap %d with give-back after %d restarts and a stop: more than %d", gap, restarts, limit)
		}
		// Without give-back each of the 6 stops abandons the rest of its
		// current range and, most of the time, a whole next range: the
		// measure tells the two apart.
		if gapWithout <= 2*step {
			t.Fatalf("gap %d without give-back: the measure cannot tell give-back from none", gapWithout)
		}
	})

	t.Run("rolling restart of three instances under load", func(t *testing.T) {
		store := pgstore.Open(t, pgstore.NewDatabase(t, srv))
		createTag(t, store, "order", step, step)
		const slots, restarts = 3, 3
		r, gap := rollingRestart(t, store, slots, restarts, true)
		requireValid(t, r)
		// Ranges interleave: a give-back succeeds only for the instance
		// holding the newest range. The bound is what a stop may cost.
		if limit := int64(2 * step * slots * (restarts + 1)); gap > limit {
			t.Fatalf("gap %d, more than 2 segments per stop (%d)", gap, limit)
		}
		t.Logf("%d instances, %d restarts each under load and a stop: %d ids, gap %d ids (bound: 2 segments per stop, %d)",
			slots, restarts, r.IDs(), gap, 2*step*slots*(restarts+1))
	})

	t.Run("an allocation by another instance makes it a no-op", func(t *testing.T) {
		ctx := context.Background()
		store := pgstore.Open(t, pgstore.NewDatabase(t, srv))
		createTag(t, store, "order", step, step)
		a := newInstance(t, store, "a", nil)
		b := newInstance(t, store, "b", nil)
		c := checker.New()
		id, err := a.Next(ctx, "order")
		if err != nil {
			t.Fatal(err)
		}
		c.Ack("a", "order", id)
		testutil.Eventually(t, 10*time.Second, "a's prefetch", func() bool { return !tagStats(a, "order").Loading })
		id, err = b.Next(ctx, "order") // b takes the range after a's
		if err != nil {
			t.Fatal(err)
		}
		c.Ack("b", "order", id)
		testutil.Eventually(t, 10*time.Second, "b's prefetch", func() bool { return !tagStats(b, "order").Loading })
		before := maxID(t, store, "order")
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if after := maxID(t, store, "order"); after != before {
			t.Fatalf("a's give-back moved max_id from %d to %d under b's range", before, after)
		}
		for range 3 * step {
			id, err := b.Next(ctx, "order")
			if err != nil {
				t.Fatal(err)
			}
			c.Ack("b", "order", id)
		}
		requireValid(t, c.Report())
	})
}
