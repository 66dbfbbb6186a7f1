package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestClient_RepairsRollback: a client remembers the highest ID it was
// granted; after the database is restored below it, its floor raises max_id
// back above it, within the floor-lead budget the instance charges it, and
// no ID is handed out twice. A rollback deeper than one grant's lead (2^32)
// takes several grants, each below the floor refused by the client, until
// the budget has raised max_id past it.
func TestClient_RepairsRollback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		start  int64
		limits httpapi.Limits
		// refused: whether the client must refuse ranges on the way.
		refused bool
	}{
		{name: "at the default budget", start: 1},
		// A budget of 2^32 a second, burst 2^32: a rollback of 3 x 2^32
		// takes about two seconds of grants.
		{name: "deeper than one grant's lead", start: 3 << 32, limits: httpapi.Limits{FloorLeadPerSecond: 1 << 32}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := memstore.New()
			if _, err := m.CreateTag(t.Context(), allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10, Start: tc.start}); err != nil {
				t.Fatal(err)
			}
			a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
			srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), Limits: tc.limits}))
			t.Cleanup(func() {
				srv.Close()
				a.Close(context.Background())
			})
			c := newClient(t, client.Config{URLs: []string{srv.URL}, Segment: segment.Config{
				WaitTimeout: 20 * time.Second, MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
			}})
			check := checker.New()
			take := func(n int) int64 {
				t.Helper()
				var last int64
				for range n {
					check.Attempt()
					id, err := c.Next(t.Context(), "order")
					if err != nil {
						t.Fatal(err)
					}
					check.Ack("client", "order", id)
					last = id
				}
				return last
			}
			take(25)
			// The 25th ID is past the prefetch threshold (10%) of the third
			// range: the load of the fourth may still be on its way. Read
			// the highest grant once it settled, or a range granted just
			// before the restore goes uncounted: its IDs pass for repaired
			// ones, and take(30) below runs into the ranges the client
			// still refuses (failed 4 of 200 runs on a loaded machine).
			testutil.Eventually(t, 10*time.Second, "the prefetch to settle", func() bool { return !c.Stats().Tags[0].Loading })
			highest := c.Stats().Tags[0].Highest
			m.SetMaxID("order", 0) // a backup restored: the client's grants are lost
			// Past what the buffers held: ranges granted after the
			// restore. While the client refuses ranges below its floor,
			// its callers are answered at once (unavailable) and ask again.
			var after int64
			testutil.Eventually(t, 30*time.Second, "an id after the restore", func() bool {
				check.Attempt()
				id, err := c.Next(t.Context(), "order")
				if err != nil {
					check.Fail(err)
					return false
				}
				check.Ack("client", "order", id)
				after = id
				return id > highest
			})
			if last := take(30); after <= highest || last <= highest {
				t.Fatalf("ids %d and %d after the restore, at or below %d, the highest granted before it", after, last, highest)
			}
			if mx := maxIDOf(t, m); mx <= highest {
				t.Fatalf("max_id %d after the repair, want it above %d", mx, highest)
			}
			if r := check.Report(); !r.Valid() {
				t.Fatalf("%s", r)
			}
			refused := c.Stats().Tags[0].Refused
			if (refused > 0) != tc.refused {
				t.Fatalf("%d ranges refused on the way: %s", refused, fmt.Sprint(tc.refused))
			}
			t.Logf("rolled back from %d to 0; repaired, %d ranges below the floor refused on the way", highest, refused)
		})
	}
}
