package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestDatabaseCrashLoop crashes PostgreSQL (immediate stop: no checkpoint,
// crash recovery at start) again and again under load from several
// instances. Every range an instance was granted before a crash must be at
// or below max_id after recovery, the instances must reconnect by
// themselves, and no ID may be handed out twice.
func TestDatabaseCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop: long")
	}
	const instances, workersPer, crashes = 4, 4, 8
	// Instances back off at most 500ms between fetches here: reloading
	// takes well under a second after the server is back.
	const reconnectLimit = 5 * time.Second
	srv := pgtest.New(t)
	dbURL := pgstore.NewDatabase(t, srv)
	admin := pgstore.Open(t, dbURL)
	createTag(t, admin, "order", 10, 50)

	allocs := make([]*allocator.Allocator, instances)
	for i := range allocs {
		allocs[i] = newInstance(t, pgstore.Open(t, dbURL), fmt.Sprint("crash-", i), nil)
	}
	c := checker.New()
	l := startLoad(c, instances*workersPer, func(ctx context.Context, w int) (string, string, int64, error) {
		id, err := allocs[w%instances].Next(ctx, "order")
		return fmt.Sprint("worker-", w), "order", id, err
	})
	defer l.stop()

	highest := func() int64 {
		var h int64
		for _, a := range allocs {
			h = max(h, tagStats(a, "order").Highest)
		}
		return h
	}
	loads := func() []int64 {
		out := make([]int64, instances)
		for i, a := range allocs {
			out[i] = tagStats(a, "order").Loads
		}
		return out
	}
	var worst time.Duration
	for crash := 1; crash <= crashes; crash++ {
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond) // under load
		granted := highest()
		acked := c.Report().Acknowledged
		srv.Stop(t, true)
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
		srv.Start(t)
		up := time.Now()
		if m := maxID(t, admin, "order"); m < granted {
			t.Fatalf("crash %d: max_id %d after recovery is below %d, granted before the crash", crash, m, granted)
		}
		// Reconnected by itself: every instance loads a new range.
		before := loads()
		testutil.Eventually(t, 60*time.Second, "every instance to load again", func() bool {
			now := loads()
			for i := range now {
				if now[i] <= before[i] {
					return false
				}
			}
			return true
		})
		recovery := time.Since(up)
		worst = max(worst, recovery)
		if recovery > reconnectLimit {
			t.Errorf("crash %d: the instances loaded again %v after the restart, more than %v", crash, recovery, reconnectLimit)
		}
		t.Logf("crash %d: granted up to %d before, max_id %d after; %d requests acknowledged before; all %d instances loading again %v after the restart",
			crash, granted, maxID(t, admin, "order"), acked, instances, recovery.Round(time.Millisecond))
	}
	time.Sleep(300 * time.Millisecond)
	l.stop()
	r := c.Report()
	requireValid(t, r)
	t.Logf("%d crashes (%s server), %d ids from %d instances x %d workers, %d failed requests, 0 duplicates; slowest reconnect %v",
		crashes, srv.Kind(), r.IDs(), instances, workersPer, r.Failed, worst.Round(time.Millisecond))
}
